// How a staged piece is cut into a shard's runs: a column shard's rows that the piece holds
// whole become one strided 2-D delivery; rows the piece starts or ends inside get their own.
// Applying the deliveries as a target would must put exactly the shard's bytes in place.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

#include "load/shard_delivery.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::scheduler::detail;

TEST_CASE("shard deliveries: whole rows of a column shard go in one 2-D run", "[scheduler][parallel]") {
  // bf16 [6, 8]: 16-byte rows; the shard takes columns 2..6 (bytes 4..12 of each row).
  const formats::TensorEntry t{.name = "w", .offset = 0, .nbytes = 96, .dtype = DType::kBF16, .shape = Shape{6, 8}};
  const ShardPlacement shard{.tensor = 0,
                             .offset = 0,
                             .dtype = DType::kBF16,
                             .bytes = 48,
                             .split = Split::kCols,
                             .slice = ShardSlice{.col_begin = 2, .col_end = 6, .rows = {{0, 6}}, .shape = Shape{6, 4}}};
  std::vector<std::byte> stored(96);
  std::iota(reinterpret_cast<unsigned char*>(stored.data()), reinterpret_cast<unsigned char*>(stored.data()) + 96, 0);

  // The piece [22, 75): row 1 from inside its shard columns, rows 2 and 3 whole, row 4 up to
  // inside them.
  const ChunkPiece piece{.tensor = 0, .chunk_offset = 0, .tensor_offset = 22, .bytes = 53};
  std::vector<Delivery> runs;
  shard_deliveries(t, shard, piece, stored.data() + 22, runs);
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].rows == 1);
  CHECK(runs[0].stored.size() == 6);  // bytes 22..28 of row 1
  CHECK(runs[1].rows == 2);
  CHECK(runs[1].stored.size() == 8);
  CHECK(runs[1].stored_pitch == 16);
  CHECK(runs[1].arena_offset == 16);  // shard rows 2 and 3
  CHECK(runs[2].rows == 1);
  CHECK(runs[2].stored.size() == 7);  // bytes 68..75 of row 4
  const ShardPieceSize size = shard_piece_size(t, shard, piece);
  CHECK(size.runs == 3);
  CHECK(size.bytes == 6 + 16 + 7);

  // Applied as the host target does, they place the shard's bytes from the piece.
  std::vector<std::byte> placed(48, std::byte{0xee});
  for (const Delivery& d : runs)
    for (std::uint64_t r = 0; r < d.rows; ++r)
      std::memcpy(placed.data() + d.arena_offset + r * d.stored.size(), d.stored.data() + r * d.stored_pitch,
                  d.stored.size());
  for (std::uint64_t row = 0; row < 6; ++row)
    for (std::uint64_t b = 0; b < 8; ++b) {
      const std::uint64_t source = row * 16 + 4 + b;
      const bool in_piece = source >= 22 && source < 75;
      INFO("shard row " << row << " byte " << b);
      CHECK(placed[row * 8 + b] == (in_piece ? stored[source] : std::byte{0xee}));
    }

  // The whole tensor as one piece: a single 2-D run of all six rows.
  runs.clear();
  shard_deliveries(t, shard, ChunkPiece{.tensor = 0, .tensor_offset = 0, .bytes = 96}, stored.data(), runs);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].rows == 6);
  CHECK(runs[0].stored.data() == stored.data() + 4);
}
