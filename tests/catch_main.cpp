// Catch2's main, after clearing the caller's QLOAD_* variables: a test that reads the process
// environment (settings, sessions, the world) sees only what the test sets itself, however the
// user's shell is set up. QLOAD_TEST_* and QLOAD_CUDASIM_* are the harness's and stay (ctest
// and tests/sanitize.sh set the simulated GPU count); tests/cli/clean_env.sh does the same for
// the shell tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;  // NOLINT: POSIX

namespace {

void clear_caller_qload_variables() {
  std::vector<std::string> names;  // collected first: unsetenv changes environ
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (name.starts_with("QLOAD_") && !name.starts_with("QLOAD_TEST_") && !name.starts_with("QLOAD_CUDASIM_"))
      names.emplace_back(name);
  }
  for (const std::string& name : names) ::unsetenv(name.c_str());
}

}  // namespace

int main(int argc, char* argv[]) {
  clear_caller_qload_variables();
  return Catch::Session().run(argc, argv);
}
