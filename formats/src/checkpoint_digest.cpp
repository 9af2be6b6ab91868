#include "qload/formats/checkpoint_digest.hpp"

#include <algorithm>

namespace qload::formats {
namespace {

// Feeds the bytes of a file, arriving in order, into the streams of the tensors they cover.
// Tensors of one file are sorted by offset and do not overlap (the catalog guarantees it),
// so one cursor walks them.
class TensorRangeHasher {
 public:
  TensorRangeHasher(const Catalog& catalog, std::uint32_t file) {
    for (std::size_t i = 0; i < catalog.tensors.size(); ++i)
      if (catalog.tensors[i].file == file) ranges_.push_back({i, catalog.tensors[i].offset, catalog.tensors[i].nbytes});
  }

  void feed(std::uint64_t offset, std::span<const std::byte> bytes) {
    const std::uint64_t end = offset + bytes.size();
    while (next_ < ranges_.size()) {
      Range& r = ranges_[next_];
      const std::uint64_t from = std::max(r.offset, offset), to = std::min(r.offset + r.nbytes, end);
      if (from < to) r.stream.update(bytes.subspan(from - offset, to - from));
      if (r.offset + r.nbytes > end) return;  // the tensor continues in the next chunk
      ++next_;
    }
  }

  void collect(const Catalog& catalog, std::vector<TensorDigestEntry>& out) const {
    for (const Range& r : ranges_) out[r.index] = {catalog.tensors[r.index].name, r.stream.digest64()};
  }

 private:
  struct Range {
    std::size_t index;
    std::uint64_t offset;
    std::uint64_t nbytes;
    io::Xxh3Stream stream;
  };
  std::vector<Range> ranges_;
  std::size_t next_ = 0;
};

}  // namespace

Result<CheckpointDigest> digest_checkpoint(io::Reader& reader, const Catalog& catalog,
                                           const io::DigestOptions& options) {
  CheckpointDigest out;
  out.tensors.resize(catalog.tensors.size());
  for (std::uint32_t f = 0; f < catalog.files.size(); ++f) {
    QLOAD_ASSIGN_OR_RETURN(const io::FileId id, reader.open_file(catalog.files[f].path));
    TensorRangeHasher tensors(catalog, f);
    io::DigestOptions per_file = options;
    per_file.on_bytes = [&](std::uint64_t offset, std::span<const std::byte> bytes) { tensors.feed(offset, bytes); };
    QLOAD_ASSIGN_OR_RETURN(const io::FileDigest digest, io::digest_file(reader, id, per_file));
    out.files.push_back({catalog.files[f].path, digest.bytes, digest.xxh3_128});
    tensors.collect(catalog, out.tensors);
  }
  return out;
}

}  // namespace qload::formats
