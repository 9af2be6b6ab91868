// The safetensors driver: a `.safetensors` file, a `*.safetensors.index.json` file, or a model
// directory (see model_dir.hpp for how one is read).
#pragma once

#include "qload/formats/driver.hpp"

namespace qload::formats {

const FormatDriver& safetensors_driver();

}  // namespace qload::formats
