# Sourced by the parallel benchmarks: the synthetic llama checkpoint they share.
# llama_model QLOAD DIR writes it to DIR unless it is there. Environment: LAYERS HIDDEN
# INTERMEDIATE VOCAB HEADS KV_HEADS SHARDS (defaults 8 2048 5632 32000 16 4 2: ~1 GB of bf16).
llama_model() {
  local qload=$1 dir=$2
  [ -f "$dir/config.json" ] && return 0
  "$qload" synth "$dir" --layers "${LAYERS:-8}" --hidden "${HIDDEN:-2048}" --intermediate "${INTERMEDIATE:-5632}" \
    --vocab "${VOCAB:-32000}" --heads "${HEADS:-16}" --kv-heads "${KV_HEADS:-4}" --shards "${SHARDS:-2}" >/dev/null
}
