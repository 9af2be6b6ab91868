// The PyTorch driver: `torch.save` zip files (`.bin`, `.pt`, `.pth`), a model directory's
// `pytorch_model.bin` or `*.bin.index.json` shards, read without running pickle
// (qload/formats/torch_file.hpp).
#pragma once

#include "qload/formats/driver.hpp"

namespace qload::formats {

const FormatDriver& torch_driver();

}  // namespace qload::formats
