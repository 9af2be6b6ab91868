// What to load and how, from `qload load` / `qload convert` arguments or a recipe (a recipe's
// settings are the defaults; a flag given on the command line that contradicts it is an error).
#pragma once

#include <optional>
#include <string>

#include "commands.hpp"
#include "qload/runtime/error.hpp"
#include "qload/scheduler/load.hpp"
#include "qload/scripts/recipe.hpp"

namespace qload::cli {

struct LoadRequest {
  std::string source;
  std::optional<scripts::Recipe> recipe;  // when the path was a recipe
  std::string devices = "cpu";            // as given, for reports
  scheduler::LoadOptions options;
};

Result<LoadRequest> build_request(const LoadArgs& args);

}  // namespace qload::cli
