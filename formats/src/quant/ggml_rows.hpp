// The CPU's whole-block GGML decoders: each writes one block's elements in order with the f32
// operations of ggml_element.hpp's value() (the same products and differences, in the same
// order), but laid out as ggml-quants.c's dequantize_row_* loops: a sub-block's scale once, then
// a run of 16 or 32 elements with one code extraction, one multiply and at most one add or
// subtract each, which the compiler vectorises. Tables (IQ4, MXFP4) hold the block's 16 possible
// products. quant_device_args_test checks every type against value() element by element (the
// kernel's arithmetic, one element per thread), ggml_blocks_test the K-quants against ggml's loops.
//
// Part of dequantize_element.hpp's family: include it after ggml_element.hpp.
#pragma once

#include <cstdint>

#include "nibble_lookup.hpp"

namespace qload::formats::detail::ggml {

// A run of `n` elements: y[l] = d * q(l) (op) m, q(l) computed by `code(l)`.
template <unsigned N, typename Code>
inline void scaled_run(float* y, float d, Code code) {
  for (unsigned l = 0; l < N; ++l) y[l] = mul_rn(d, f32_of(code(l)));
}
template <unsigned N, typename Code>
inline void scaled_run_minus(float* y, float d, float m, Code code) {
  for (unsigned l = 0; l < N; ++l) y[l] = sub_rn(mul_rn(d, f32_of(code(l))), m);
}
template <unsigned N, typename Code>
inline void scaled_run_plus(float* y, float d, float m, Code code) {
  for (unsigned l = 0; l < N; ++l) y[l] = add_rn(mul_rn(d, f32_of(code(l))), m);
}

// The 16 products d * level[q] of a block whose codes index a table of levels.
template <typename Level>
inline void level_table(float* table, float d, Level level) {
  for (std::int32_t q = 0; q < 16; ++q) table[q] = mul_rn(d, f32_of(level(q)));
}
// 32 elements from 16 bytes of nibbles through `table`: low nibbles first, then high ones.
inline void nibble_lookups(float* y, const float* table, const std::uint8_t* qs) {
  lookup_nibbles_split(table, qs, 16, y);
}

struct Rows {
  static void block(Q4_0, const std::uint8_t* b, float* y) {
    const float d = half_at(b);
    const std::uint8_t* qs = b + 2;
    scaled_run<16>(y, d, [&](unsigned l) { return (qs[l] & 0xF) - 8; });
    scaled_run<16>(y + 16, d, [&](unsigned l) { return (qs[l] >> 4) - 8; });
  }
  static void block(Q4_1, const std::uint8_t* b, float* y) {
    const float d = half_at(b), m = half_at(b + 2);
    const std::uint8_t* qs = b + 4;
    scaled_run_plus<16>(y, d, m, [&](unsigned l) { return qs[l] & 0xF; });
    scaled_run_plus<16>(y + 16, d, m, [&](unsigned l) { return qs[l] >> 4; });
  }
  static void block(Q5_0, const std::uint8_t* b, float* y) {
    const float d = half_at(b);
    const std::uint32_t qh = u32_at(b + 2);
    const std::uint8_t* qs = b + 6;
    scaled_run<16>(y, d,
                   [&](unsigned l) { return ((qs[l] & 0xF) | static_cast<std::int32_t>(((qh >> l) & 1u) << 4)) - 16; });
    scaled_run<16>(y + 16, d, [&](unsigned l) {
      return ((qs[l] >> 4) | static_cast<std::int32_t>(((qh >> (l + 16)) & 1u) << 4)) - 16;
    });
  }
  static void block(Q5_1, const std::uint8_t* b, float* y) {
    const float d = half_at(b), m = half_at(b + 2);
    const std::uint32_t qh = u32_at(b + 4);
    const std::uint8_t* qs = b + 8;
    scaled_run_plus<16>(y, d, m,
                        [&](unsigned l) { return (qs[l] & 0xF) | static_cast<std::int32_t>(((qh >> l) & 1u) << 4); });
    scaled_run_plus<16>(y + 16, d, m, [&](unsigned l) {
      return (qs[l] >> 4) | static_cast<std::int32_t>(((qh >> (l + 16)) & 1u) << 4);
    });
  }
  static void block(Q8_0, const std::uint8_t* b, float* y) {
    scaled_run<32>(y, half_at(b), [&](unsigned l) { return static_cast<std::int8_t>(b[2 + l]); });
  }
  static void block(Q8_1, const std::uint8_t* b, float* y) {
    scaled_run<32>(y, half_at(b), [&](unsigned l) { return static_cast<std::int8_t>(b[4 + l]); });
  }
  static void block(Q8_K, const std::uint8_t* b, float* y) {
    scaled_run<256>(y, as_float(u32_at(b)), [&](unsigned l) { return static_cast<std::int8_t>(b[4 + l]); });
  }
  // The block's f16 scales are widened once, not once per sub-block as scale(b, j) would: the
  // same products.
  static void block(Q2_K, const std::uint8_t* b, float* y) {
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    for (unsigned half = 0; half < 2; ++half) {  // 128 elements from 32 bytes of 2-bit codes
      const std::uint8_t* q = b + 16 + half * 32;
      for (unsigned shift = 0; shift < 8; shift += 2)
        for (unsigned part = 0; part < 2; ++part, y += 16) {  // sub-block j: 16 codes at one shift
          const std::uint8_t sc = b[half * 8 + shift + part];
          const float dl = mul_rn(d, f32_of(sc & 0xF)), ml = mul_rn(dmin, f32_of(sc >> 4));
          const std::uint8_t* qp = q + part * 16;
          scaled_run_minus<16>(y, dl, ml, [&](unsigned l) { return (qp[l] >> shift) & 3; });
        }
    }
  }
  static void block(Q3_K, const std::uint8_t* b, float* y) {
    const float d = half_at(b + 108);
    for (unsigned half = 0; half < 2; ++half) {
      const std::uint8_t* q = b + 32 + half * 32;
      for (unsigned shift = 0; shift < 8; shift += 2) {
        const unsigned bit = half * 4 + shift / 2;  // the high-bit mask's bit for these 32 elements
        for (unsigned part = 0; part < 2; ++part, y += 16) {
          const float dl = mul_rn(d, f32_of(Q3_K::scale_code(b, half * 8 + shift + part)));
          const std::uint8_t* qp = q + part * 16;
          const std::uint8_t* hm = b + part * 16;
          scaled_run<16>(y, dl, [&](unsigned l) {
            return ((qp[l] >> shift) & 3) - static_cast<std::int32_t>((((hm[l] >> bit) & 1u) ^ 1u) << 2);
          });
        }
      }
    }
  }
  static void block(Q4_K, const std::uint8_t* b, float* y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    for (unsigned j = 0; j < 8; j += 2, y += 64) {  // 64 elements from 32 bytes: low nibbles, then high
      const std::uint8_t* q = b + 16 + j * 16;
      const K4Scale lo = k4_scale_of(b, j, d, dmin), hi = k4_scale_of(b, j + 1, d, dmin);
      scaled_run_minus<32>(y, lo.d, lo.dm, [&](unsigned l) { return q[l] & 0xF; });
      scaled_run_minus<32>(y + 32, hi.d, hi.dm, [&](unsigned l) { return q[l] >> 4; });
    }
  }
  static void block(Q5_K, const std::uint8_t* b, float* y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const std::uint8_t* qh = b + 16;
    for (unsigned j = 0; j < 8; j += 2, y += 64) {
      const std::uint8_t* q = b + 48 + j * 16;
      const K4Scale lo = k4_scale_of(b, j, d, dmin), hi = k4_scale_of(b, j + 1, d, dmin);
      scaled_run_minus<32>(y, lo.d, lo.dm, [&](unsigned l) {
        return (q[l] & 0xF) | static_cast<std::int32_t>(((qh[l] >> j) & 1u) << 4);
      });
      scaled_run_minus<32>(y + 32, hi.d, hi.dm, [&](unsigned l) {
        return (q[l] >> 4) | static_cast<std::int32_t>(((qh[l] >> (j + 1)) & 1u) << 4);
      });
    }
  }
  static void block(Q6_K, const std::uint8_t* b, float* y) {
    const float d = half_at(b + 208);
    // ggml's loop: each of 32 positions l gives four elements (l, l + 32, l + 64, l + 96 of the
    // half), from the low and high nibbles of two ql bytes and four crumbs of one qh byte.
    for (unsigned half = 0; half < 2; ++half, y += 128) {
      const std::uint8_t* ql = b + half * 64;
      const std::uint8_t* qh = b + 128 + half * 32;
      for (unsigned part = 0; part < 2; ++part) {  // l in [16 part, 16 part + 16): one scale per quarter
        const unsigned j = half * 8 + part;
        const auto sub = [&](unsigned i) { return mul_rn(d, f32_of(static_cast<std::int8_t>(b[192 + i]))); };
        const float d0 = sub(j), d1 = sub(j + 2), d2 = sub(j + 4), d3 = sub(j + 6);
        for (unsigned l = part * 16; l < part * 16 + 16; ++l) {
          const std::int32_t h = qh[l];
          y[l] = mul_rn(d0, f32_of(((ql[l] & 0xF) | ((h & 3) << 4)) - 32));
          y[l + 32] = mul_rn(d1, f32_of(((ql[l + 32] & 0xF) | (((h >> 2) & 3) << 4)) - 32));
          y[l + 64] = mul_rn(d2, f32_of(((ql[l] >> 4) | (((h >> 4) & 3) << 4)) - 32));
          y[l + 96] = mul_rn(d3, f32_of(((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32));
        }
      }
    }
  }
  static void block(IQ4_NL, const std::uint8_t* b, float* y) {
    float table[16];
    level_table(table, half_at(b), iq4_level);
    nibble_lookups(y, table, b + 2);
  }
  static void block(IQ4_XS, const std::uint8_t* b, float* y) {
    const float d = half_at(b);
    for (unsigned j = 0; j < 8; ++j, y += 32) {
      float table[16];
      level_table(table, mul_rn(d, f32_of(IQ4_XS::scale_code(b, j))), iq4_level);
      nibble_lookups(y, table, b + 8 + j * 16);
    }
  }
  static void block(MXFP4, const std::uint8_t* b, float* y) {
    const std::uint32_t e = b[0];
    const float d = as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);  // as MXFP4::value
    float table[16];
    level_table(table, d, e2m1_level);
    nibble_lookups(y, table, b + 1);
  }
};

// Whether the CPU has a whole-block decoder for T (else it runs value() per element).
template <typename T>
concept HasRows = requires(const std::uint8_t* b, float* y) {
  Rows::block(T{}, b, y);
};

}  // namespace qload::formats::detail::ggml
