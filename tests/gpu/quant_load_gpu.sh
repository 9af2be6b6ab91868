#!/usr/bin/env bash
# On a GPU machine (bench/gpu.sh runs it): for every `qload synth --quant` scheme, a load that
# dequantizes on cuda:0 (packed parts copied over, decoded by the CUDA kernels) dumps exactly
# the bytes of the same load on the CPU, for bf16, f16 and f32 outputs; and keeping the weights
# packed on the GPU dumps the file's bytes. Usage: quant_load_gpu.sh QLOAD
# SCHEMES="gptq4 fp8-block" checks only those (default: all ten).
source "$(dirname "${BASH_SOURCE[0]}")/../cli/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
qload=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
# The integer schemes need K to be a multiple of their group size (128); the kernel test
# (dequantize_gpu_test.cpp) covers partial groups and blocks.
shape=(--layers 2 --hidden 384 --intermediate 1152 --vocab 500 --heads 4 --kv-heads 2 --shards 2)
read -ra schemes <<<"${SCHEMES:-gptq4 gptq3 gptq8 awq fp8-block fp8-channel fp8-tensor ct-pack4 ct-pack4-asym ct-fp8}"
for q in "${schemes[@]}"; do
  "$qload" synth "$dir/$q" "${shape[@]}" --seed 5 --quant "$q" >/dev/null
  for t in bf16 f16 f32; do
    "$qload" load "$dir/$q" --device cpu --dequantize "$t" --dump "$dir/cpu" >/dev/null
    "$qload" load "$dir/$q" --device cuda:0 --dequantize "$t" --dump "$dir/gpu" >/dev/null
    if cmp -s "$dir/cpu/cpu.safetensors" "$dir/gpu/cuda:0.safetensors"; then
      echo "same bytes: $q --dequantize $t"
    else
      echo "DIFFERENT: $q --dequantize $t"
      failed=1
    fi
  done
  "$qload" load "$dir/$q" --device cpu --dump "$dir/cpu" >/dev/null
  "$qload" load "$dir/$q" --device cuda:0 --dump "$dir/gpu" >/dev/null
  if cmp -s "$dir/cpu/cpu.safetensors" "$dir/gpu/cuda:0.safetensors"; then
    echo "same bytes: $q kept packed"
  else
    echo "DIFFERENT: $q kept packed"
    failed=1
  fi
done
[ "$failed" -eq 0 ] && echo "quant_load_gpu: every scheme decodes on the GPU to the CPU's bytes"
exit "$failed"
