# Sourced first by every shell test that runs qload: a test's qload sees only the QLOAD_*
# variables the test sets itself. The caller's own (an unrelated QLOAD_THREADS, a QLOAD_IO
# for their machine) would change what qload does or add a warning line to what the test
# reads. Kept: QLOAD_TEST_* and QLOAD_CUDASIM_*, the harness's (ctest sets the simulated GPU
# count for the GPU variants), which qload never reads as settings.
for qload_env_name in $(compgen -e | grep '^QLOAD_' | grep -v '^QLOAD_\(TEST\|CUDASIM\)_'); do
  unset "$qload_env_name"
done
unset qload_env_name
# The harness's host layout: tests/CMakeLists.txt runs some tests again with the one that is
# not the default (cli.aligned_layout.*), by this variable, which qload never reads itself.
if [ -n "${QLOAD_TEST_HOST_LAYOUT:-}" ]; then export QLOAD_HOST_LAYOUT=$QLOAD_TEST_HOST_LAYOUT; fi
