#!/usr/bin/env bash
# The installed package, as an embedder meets it: `cmake --install` into a temporary prefix,
# then examples/embed-c and examples/embed-cpp built out of tree, once through
# find_package(qload) and once through pkg-config, and run on a synthetic checkpoint. Every
# tensor's dtype and FNV-1a must equal what Python computes from the safetensors files
# directly (no qload code in the reference); examples/embed-into, a server filling its own
# parameters (fused q/k/v and gate/up) through qload_load_into, must give the same lines.
source "$(dirname "${BASH_SOURCE[0]}")/../cli/clean_env.sh"  # only the QLOAD_* variables this test sets
set -euo pipefail
build=$1
source_dir=$2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/qload/qload.h include/dlpack/dlpack.h lib/libqload.so lib/libqload.so.1 lib/libqload.a bin/qload \
         lib/cmake/qload/qloadConfig.cmake lib/cmake/qload/qloadConfigVersion.cmake lib/pkgconfig/qload.pc; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
done
soname=$(objdump -p "$prefix/lib/libqload.so" | awk '/SONAME/ {print $2}')
[ "$soname" = libqload.so.1 ] || { echo "FAIL: SONAME is '$soname'"; exit 1; }
exported=$(nm -D --defined-only "$prefix/lib/libqload.so" | awk '$2 == "T" {print $3}' | grep -v '^qload_' || true)
[ -z "$exported" ] || { echo "FAIL: libqload.so exports more than qload_*: $exported"; exit 1; }

# Built out of tree: each through find_package and pkg-config, and the C one statically too.
for lang in c cpp; do
  cmake -S "$source_dir/examples/embed-$lang" -B "$work/$lang-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/$lang-cmake" >/dev/null
done
cmake -S "$source_dir/examples/embed-c" -B "$work/c-static" -DCMAKE_PREFIX_PATH="$prefix" -DEMBED_STATIC=ON \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/c-static" >/dev/null
if ldd "$work/c-static/embed_c" | grep -q libqload; then echo "FAIL: the static build uses libqload.so"; exit 1; fi
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -std=c99 -Wall -Wextra -pedantic -Werror "$source_dir/examples/embed-c/main.c" $(pkg-config --cflags --libs qload) \
  -o "$work/c-pkgconfig"
c++ -std=c++17 -Wall -Wextra -pedantic -Werror "$source_dir/examples/embed-cpp/main.cpp" \
  $(pkg-config --cflags --libs qload) -o "$work/cpp-pkgconfig"
cmake -S "$source_dir/examples/embed-into" -B "$work/into-cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/into-cmake" >/dev/null
# Statically through pkg-config: the archive by path (-lqload would pick the .so), then the
# private libraries.
cc -std=c99 "$source_dir/examples/embed-c/main.c" $(pkg-config --cflags qload) "$prefix/lib/libqload.a" \
  $(pkg-config --static --libs qload | sed 's/-lqload\b//') -o "$work/c-pkgconfig-static"

"$prefix/bin/qload" synth "$work/m" --layers 1 --hidden 64 --intermediate 160 --vocab 96 --heads 4 --kv-heads 2 --shards 2 >/dev/null
python3 - "$work/m" > "$work/want.txt" <<'PY'
import glob, json, struct, sys
def fnv1a(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
for path in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        print(name, t["dtype"], format(fnv1a(blob[8 + n + begin:8 + n + end]), "016x"))
PY
sort -o "$work/want.txt" "$work/want.txt"
[ "$(wc -l < "$work/want.txt")" -gt 5 ] || { echo "FAIL: the reference found no tensors"; exit 1; }
for program in c-cmake/embed_c cpp-cmake/embed_cpp c-pkgconfig cpp-pkgconfig c-static/embed_c c-pkgconfig-static; do
  LD_LIBRARY_PATH=$prefix/lib "$work/$program" "$work/m" 1MiB | sort > "$work/got.txt"
  diff -u "$work/want.txt" "$work/got.txt" || { echo "FAIL: $program read other bytes than the checkpoint's"; exit 1; }
done
# A server's own parameters filled in place (qload_load_into): the same bytes.
LD_LIBRARY_PATH=$prefix/lib "$work/into-cmake/embed_into" "$work/m" | sort > "$work/got.txt"
diff -u "$work/want.txt" "$work/got.txt" || { echo "FAIL: embed_into's parameters hold other bytes than the checkpoint's"; exit 1; }
echo "install ok: $(wc -l < "$work/want.txt") tensors through find_package and pkg-config, C and C++, shared and static"
