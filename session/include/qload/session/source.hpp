// Where a source's files are: the path itself, or the local Hugging Face cache's snapshot of a
// model id (`qload.resolve` in Python). Every load, inspection and hash resolves its source the
// same way on its own (formats::open_catalog); this is for clients that read a model's other
// files (config.json, tokenizer) themselves.
#pragma once

#include <string>

#include "qload/runtime/error.hpp"

namespace qload::session {

// `source` itself when it exists as a path or is not a Hugging Face model id
// ("org/name[@revision]"); otherwise its snapshot folder in the Hugging Face cache, which is
// `hub_cache` when not empty (vLLM's --download-dir, huggingface_hub's cache_dir) and otherwise
// the one huggingface_hub uses (HF_HUB_CACHE, HF_HOME, ...: formats/hub_cache.hpp). Offline:
// nothing is downloaded. kNotFound / kCorrupt naming the cache path when the id is not there
// complete. Thread-safe.
Result<std::string> resolve_source(const std::string& source, const std::string& hub_cache = {});

}  // namespace qload::session
