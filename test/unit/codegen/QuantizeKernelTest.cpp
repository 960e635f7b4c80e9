//===- QuantizeKernelTest.cpp - Generated cache-row kernels vs numerics ----===//
//
// csa.quantize / csa.dequantize / csa.cache_append kernels built as IR,
// lowered, dlopened and run on fresh random rows; the row bytes must equal
// `numerics::quantizeRow` byte for byte and the values
// `numerics::dequantizeRow` bit for bit.
//
//===----------------------------------------------------------------------===//
#include "codegen/host/QuantizeKernels.h"
#include "test/unit/codegen/KernelTestSupport.h"

#include "mlir/IR/Diagnostics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace csa::codegen {
namespace {

using namespace csa::codegen::testing;
using nx::RowFormat;

using QuantizeFn = void (*)(Descriptor<2, uint16_t> *, Descriptor<2, uint8_t> *);
using QuantizeF32Fn = void (*)(Descriptor<2, float> *, Descriptor<2, uint8_t> *);
using DequantizeFn = void (*)(Descriptor<2, uint8_t> *, Descriptor<2, uint16_t> *);
using DequantizeF32Fn = void (*)(Descriptor<2, uint8_t> *, Descriptor<2, float> *);
using AppendFn = int32_t (*)(Descriptor<2, uint8_t> *, Descriptor<2, uint8_t> *,
                             int64_t);

struct Case {
  RowFormat format;
  int64_t dim;
  const char *name;
};

/// The released dimensions, and a smaller dim per format.
const Case kCases[] = {
    {RowFormat::MainKvFp4, 512, "main_kv_512"},
    {RowFormat::IndexKeyFp4, 128, "index_key_128"},
    {RowFormat::SwaKvFp8, 512, "swa_kv_512"},
    {RowFormat::MainKvFp4, 48, "main_kv_48"},
    {RowFormat::IndexKeyFp4, 64, "index_key_64"},
    {RowFormat::SwaKvFp8, 96, "swa_kv_96"},
};

float amaxFloor(RowFormat format) {
  return format == RowFormat::MainKvFp4     ? nx::kFp4E4M3AmaxFloor
         : format == RowFormat::IndexKeyFp4 ? nx::kFp4Ue8m0AmaxFloor
                                            : nx::kFp8AmaxFloor;
}

/// Coverage of the interesting cases, counted on the reference side.
struct Coverage {
  int groups = 0, floored = 0, zero = 0, saturatedScale = 0, nonFinite = 0,
      ties = 0;
};

/// Random rows, one kind per group: wide-range magnitudes, typical values,
/// zeros (both signs), groups under the format's amax floor (down to bf16
/// subnormals), huge values (the main-KV scale saturates), inf/NaN elements,
/// and exact rounding ties of the element format.
std::vector<float> makeRows(RowFormat format, int64_t dim, int64_t rows,
                            uint32_t seed, Coverage &cov) {
  const int64_t group = int64_t(nx::rowGroup(format));
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> kindDist(0, 7), expDist(-140, 124),
      smallExp(1, 12), pick(0, 1 << 20);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Element values at which the element rounding ties (in units of the
  // scale), and the amax that makes the scale exactly that unit.
  const bool fp4 = format != RowFormat::SwaKvFp8;
  const std::vector<float> fp4Ties = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
  const std::vector<float> fp8Ties = {0x1p-10f, 0x3p-10f, 1.0625f, 1.1875f,
                                      15.5f, 400.f, 432.f};
  std::vector<float> x(size_t(rows * dim));
  for (int64_t g0 = 0; g0 < rows * dim; g0 += group) {
    float *v = &x[size_t(g0)];
    int kind = kindDist(gen);
    switch (kind) {
    case 0: { // any magnitude bf16 can hold
      float scale = std::ldexp(1.f, expDist(gen));
      for (int64_t i = 0; i < group; ++i)
        v[i] = normal(gen) * scale;
      break;
    }
    case 1:
      for (int64_t i = 0; i < group; ++i)
        v[i] = normal(gen);
      break;
    case 2:
      for (int64_t i = 0; i < group; ++i)
        v[i] = (pick(gen) & 1) ? -0.f : 0.f;
      break;
    case 3: { // under the amax floor
      float scale = amaxFloor(format) * std::ldexp(1.f, -smallExp(gen));
      for (int64_t i = 0; i < group; ++i)
        v[i] = normal(gen) * scale * 0.25f;
      break;
    }
    case 4: { // huge: 1e3 .. 1e38
      float scale = std::pow(10.f, float(3 + pick(gen) % 36));
      for (int64_t i = 0; i < group; ++i)
        v[i] = normal(gen) * scale;
      break;
    }
    case 5: { // non-finite elements in a typical group
      for (int64_t i = 0; i < group; ++i)
        v[i] = normal(gen) * 3.f;
      const float bad[] = {inf, -inf, nan, -nan};
      for (int k = 0; k < 1 + pick(gen) % 3; ++k)
        v[pick(gen) % group] = bad[pick(gen) % 4];
      break;
    }
    default: { // ties, at a power-of-two unit
      int p = fp4 ? (format == RowFormat::MainKvFp4 ? -9 + pick(gen) % 17
                                                    : -120 + pick(gen) % 240)
                  : -20 + pick(gen) % 40;
      float unit = std::ldexp(1.f, p);
      const auto &ties = fp4 ? fp4Ties : fp8Ties;
      for (int64_t i = 0; i < group; ++i)
        v[i] = ties[size_t(pick(gen)) % ties.size()] * unit *
               ((pick(gen) & 1) ? -1.f : 1.f);
      // amax 6 * unit (FP4: s = unit) or 440 * unit (FP8: s = unit).
      v[pick(gen) % group] = (fp4 ? 6.f : 440.f) * unit;
      ++cov.ties;
      break;
    }
    }
    // What the reference stores: bf16.
    for (int64_t i = 0; i < group; ++i)
      v[i] = nx::roundToBf16(v[i]);
    float amax = nx::blockAmax(v, size_t(group));
    ++cov.groups;
    cov.zero += amax == 0.f;
    cov.floored += amax < amaxFloor(format);
    cov.saturatedScale += amax / 6.f > nx::kE4M3Max;
    for (int64_t i = 0; i < group; ++i)
      cov.nonFinite += !std::isfinite(v[i]);
  }
  return x;
}

std::vector<uint16_t> toBf16(const std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = nx::floatToBf16(x[i]);
  return out;
}

std::vector<uint8_t> referenceRows(RowFormat format, const std::vector<float> &x,
                                   int64_t dim) {
  const size_t bytes = nx::rowBytes(format, size_t(dim));
  const size_t rows = x.size() / size_t(dim);
  std::vector<uint8_t> out(rows * bytes);
  for (size_t r = 0; r < rows; ++r)
    nx::quantizeRow(format, &x[r * size_t(dim)], size_t(dim), &out[r * bytes]);
  return out;
}

bool sameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b); // payloads are not specified
  return nx::floatBits(a) == nx::floatBits(b);
}

TEST(QuantizeKernels, RowsMatchNumericsByteForByte) {
  KernelLibrary lib([](mlir::ModuleOp m) {
    for (const Case &c : kCases)
      ASSERT_TRUE(buildQuantizeRowsKernel(m, std::string("q_") + c.name,
                                          c.format, c.dim));
  });
  for (const Case &c : kCases) {
    auto *kernel = reinterpret_cast<QuantizeFn>(lib.symbol(std::string("q_") + c.name));
    ASSERT_NE(kernel, nullptr);
    const int64_t bytes = int64_t(nx::rowBytes(c.format, size_t(c.dim)));
    Coverage cov;
    size_t checked = 0;
    for (uint32_t seed : {11u, 12u, 13u, 14u}) {
      const int64_t rows = 40 + seed;
      std::vector<float> x = makeRows(c.format, c.dim, rows, seed, cov);
      std::vector<uint16_t> in = toBf16(x);
      std::vector<uint8_t> out(size_t(rows * bytes), 0xA5);
      auto dx = describe<2>(in, {rows, c.dim});
      auto dout = describe<2>(out, {rows, bytes});
      kernel(&dx, &dout);
      std::vector<uint8_t> expected = referenceRows(c.format, x, c.dim);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(int(out[i]), int(expected[i]))
            << c.name << " seed " << seed << " row " << i / size_t(bytes)
            << " byte " << i % size_t(bytes);
      checked += out.size();
    }
    EXPECT_GT(cov.floored, cov.zero) << c.name; // non-zero groups floored too
    EXPECT_GT(cov.zero, 0) << c.name;
    EXPECT_GT(cov.nonFinite, 0) << c.name;
    EXPECT_GT(cov.ties, 0) << c.name;
    EXPECT_GT(cov.saturatedScale, 0) << c.name;
    std::cout << "[ quantize ] " << c.name << ": " << checked << " bytes, "
              << cov.groups << " groups (" << cov.floored << " floored, "
              << cov.zero << " zero, " << cov.saturatedScale
              << " with amax/6 > 448, " << cov.ties << " tie groups, "
              << cov.nonFinite << " non-finite elements)\n";
  }
}

TEST(QuantizeKernels, EveryBf16ValueMatchesNumerics) {
  // All 65536 bf16 patterns (NaNs, infinities, subnormals, both zeros), in
  // order (groups of neighbouring values) and in shuffled orders (groups
  // mixing every magnitude), through every format.
  KernelLibrary lib([](mlir::ModuleOp m) {
    for (const Case &c : kCases)
      buildQuantizeRowsKernel(m, std::string("q_") + c.name, c.format, c.dim);
  });
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = uint16_t(i);
  for (const Case &c : kCases) {
    auto *kernel = reinterpret_cast<QuantizeFn>(lib.symbol(std::string("q_") + c.name));
    ASSERT_NE(kernel, nullptr);
    const int64_t bytes = int64_t(nx::rowBytes(c.format, size_t(c.dim)));
    // Whole rows: the last one wraps around to the first values.
    const int64_t rows = (int64_t(all.size()) + c.dim - 1) / c.dim;
    size_t checked = 0;
    for (uint32_t shuffle = 0; shuffle < 4; ++shuffle) {
      std::vector<uint16_t> in = all;
      if (shuffle) {
        std::mt19937 gen(shuffle);
        std::shuffle(in.begin(), in.end(), gen);
      }
      for (size_t i = all.size(); i < size_t(rows * c.dim); ++i)
        in.push_back(in[i - all.size()]);
      std::vector<float> x(in.size());
      for (size_t i = 0; i < in.size(); ++i)
        x[i] = nx::bf16ToFloat(in[i]);
      std::vector<uint8_t> out(size_t(rows * bytes), 0xA5);
      auto dx = describe<2>(in, {rows, c.dim});
      auto dout = describe<2>(out, {rows, bytes});
      kernel(&dx, &dout);
      std::vector<uint8_t> expected = referenceRows(c.format, x, c.dim);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(int(out[i]), int(expected[i]))
            << c.name << " shuffle " << shuffle << " row " << i / size_t(bytes)
            << " byte " << i % size_t(bytes);
      checked += out.size();
    }
    std::cout << "[ quantize ] every bf16, " << c.name << ": " << checked
              << " bytes\n";
  }
}

TEST(QuantizeKernels, TiesRoundToEvenAsNumericsDocuments) {
  // Main KV, two groups. Group 0: amax 6 gives s = e4m3(6 / 6) = 1, so the
  // elements are encoded as they are. Group 1: amax 6.1875 gives s =
  // e4m3(1.03125) = 1 (rounded down), so 6.1875 / s > 6 saturates to 6.
  const int64_t dim = 32;
  std::vector<float> x = {6.f,  0.25f,  0.75f, 1.25f, 1.75f, 2.5f, 3.5f,  5.f,
                          -0.f, -0.25f, -5.f,  -6.f,  0.f,   -1.75f, 0.5f, 3.f,
                          6.1875f, -6.1875f, 1.f, 0.f, 0.f, 0.f, 0.f, 0.f,
                          0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildQuantizeRowsKernel(m, "q", RowFormat::MainKvFp4, 32);
  });
  auto *kernel = reinterpret_cast<QuantizeFn>(lib.symbol("q"));
  ASSERT_NE(kernel, nullptr);
  std::vector<uint16_t> in = toBf16(x);
  std::vector<uint8_t> out(18);
  auto dx = describe<2>(in, {1, dim});
  auto dout = describe<2>(out, {1, 18});
  kernel(&dx, &dout);
  // 6, 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4, -0,
  // -0.25->-0, -5->-4, -6, 0, -1.75->-2, 0.5, 3 | 6.1875->6, -6.1875->-6, 1.
  const uint8_t codes[32] = {0x7, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6,
                             0x8, 0x8, 0xE, 0xF, 0x0, 0xC, 0x1, 0x5,
                             0x7, 0xF, 0x2};
  for (int j = 0; j < 16; ++j)
    EXPECT_EQ(int(out[size_t(j)]),
              int(nx::packE2M1(codes[2 * j], codes[2 * j + 1])))
        << "byte " << j;
  EXPECT_EQ(int(out[16]), int(nx::encodeE4M3(1.f)));
  EXPECT_EQ(int(out[17]), int(nx::encodeE4M3(1.f)));
  EXPECT_EQ(out, referenceRows(RowFormat::MainKvFp4, x, dim));
}

TEST(QuantizeKernels, Fp32InputMatchesNumerics) {
  // csa.quantize also takes f32 rows: values that are not bf16-exact.
  KernelLibrary lib([](mlir::ModuleOp m) {
    mlir::Type f32 = mlir::Float32Type::get(m.getContext());
    for (const Case &c : kCases)
      buildQuantizeRowsKernel(m, std::string("q32_") + c.name, c.format, c.dim,
                              f32);
  });
  for (const Case &c : kCases) {
    auto *kernel =
        reinterpret_cast<QuantizeF32Fn>(lib.symbol(std::string("q32_") + c.name));
    ASSERT_NE(kernel, nullptr);
    const int64_t rows = 33, bytes = int64_t(nx::rowBytes(c.format, size_t(c.dim)));
    Coverage cov;
    std::vector<float> x = makeRows(c.format, c.dim, rows, 21, cov);
    std::mt19937 gen(22);
    std::uniform_real_distribution<float> jitter(0.999f, 1.001f);
    for (float &v : x)
      v *= jitter(gen); // off the bf16 grid
    std::vector<uint8_t> out(size_t(rows * bytes), 0xA5);
    auto dx = describe<2>(x, {rows, c.dim});
    auto dout = describe<2>(out, {rows, bytes});
    kernel(&dx, &dout);
    EXPECT_EQ(out, referenceRows(c.format, x, c.dim)) << c.name;
  }
}

// The cache format variants' rows (V4's FP8 main-KV row, the FP8 index-key
// row): the kernels against numerics, byte for byte and bit for bit, on f32
// rows off the bf16 grid with zeros, huge values, infinities and NaNs among
// them (in the NoPE and the RoPE channels).
TEST(QuantizeKernels, Fp8VariantRowsMatchNumerics) {
  struct Variant {
    const char *name;
    int64_t dim, rope; ///< rope < 0: an index-key row
  };
  const Variant variants[] = {{"v4_512", 512, 64}, {"v4_32", 32, 8}, {"v4_96", 96, 32},
                              {"k8_128", 128, -1}, {"k8_32", 32, -1}};
  KernelLibrary lib([&](mlir::ModuleOp m) {
    mlir::Type f32 = mlir::Float32Type::get(m.getContext());
    for (const Variant &v : variants) {
      const std::string n = v.name;
      if (v.rope >= 0) {
        buildQuantizeMainKvFp8Kernel(m, "q_" + n, v.dim, v.rope, f32);
        buildDequantizeMainKvFp8Kernel(m, "d_" + n, v.dim, v.rope, f32);
        buildDequantizeMainKvFp8Kernel(m, "dbf_" + n, v.dim, v.rope);
      } else {
        buildQuantizeIndexKeyFp8Kernel(m, "q_" + n, v.dim, f32);
        buildDequantizeIndexKeyFp8Kernel(m, "d_" + n, v.dim, f32);
        buildDequantizeIndexKeyFp8Kernel(m, "dbf_" + n, v.dim);
      }
    }
  });
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Variant &v : variants) {
    const std::string n = v.name;
    auto *quantize = reinterpret_cast<QuantizeF32Fn>(lib.symbol("q_" + n));
    auto *dequantize = reinterpret_cast<DequantizeF32Fn>(lib.symbol("d_" + n));
    auto *dequantizeBf16 = reinterpret_cast<DequantizeFn>(lib.symbol("dbf_" + n));
    ASSERT_TRUE(quantize && dequantize && dequantizeBf16);
    const bool v4 = v.rope >= 0;
    const int64_t rows = 29;
    const int64_t bytes = v4 ? int64_t(nx::mainKvFp8RowBytes(size_t(v.dim), size_t(v.rope)))
                             : int64_t(nx::indexKeyFp8RowBytes(size_t(v.dim)));
    std::mt19937 gen(31);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_int_distribution<int> scaleExp(-20, 20), special(0, 40);
    std::vector<float> x(size_t(rows * v.dim));
    for (int64_t r = 0; r < rows; ++r) {
      const float rowScale = std::ldexp(1.f, scaleExp(gen));
      for (int64_t c = 0; c < v.dim; ++c) {
        float value = normal(gen) * rowScale;
        switch (special(gen)) {
        case 0: value = 0.f; break;
        case 1: value = -0.f; break;
        case 2: value = inf; break;
        case 3: value = -nan; break;
        case 4: value = 3e38f; break;
        default: break;
        }
        x[size_t(r * v.dim + c)] = r == 0 ? 0.f : value; // row 0: all zero (the floor)
      }
    }
    std::vector<uint8_t> got(size_t(rows * bytes), 0xA5), want(size_t(rows * bytes));
    for (int64_t r = 0; r < rows; ++r) {
      if (v4)
        nx::quantizeMainKvFp8Row(&x[size_t(r * v.dim)], size_t(v.dim), size_t(v.rope),
                                 &want[size_t(r * bytes)]);
      else
        nx::quantizeIndexKeyFp8Row(&x[size_t(r * v.dim)], size_t(v.dim), &want[size_t(r * bytes)]);
    }
    auto dx = describe<2>(x, {rows, v.dim});
    auto dgot = describe<2>(got, {rows, bytes});
    quantize(&dx, &dgot);
    ASSERT_EQ(got, want) << n;
    // Dequantized: fp32 bit for bit, and bf16 as numerics' values rounded.
    std::vector<float> y(size_t(rows * v.dim), 1.f), ref(size_t(rows * v.dim));
    for (int64_t r = 0; r < rows; ++r) {
      if (v4)
        nx::dequantizeMainKvFp8Row(&want[size_t(r * bytes)], size_t(v.dim), size_t(v.rope),
                                   &ref[size_t(r * v.dim)]);
      else
        nx::dequantizeIndexKeyFp8Row(&want[size_t(r * bytes)], size_t(v.dim),
                                     &ref[size_t(r * v.dim)]);
    }
    auto dy = describe<2>(y, {rows, v.dim});
    dequantize(&dgot, &dy);
    EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * sizeof(float))) << n;
    std::vector<uint16_t> yb(size_t(rows * v.dim), 0x1234);
    auto dyb = describe<2>(yb, {rows, v.dim});
    dequantizeBf16(&dgot, &dyb);
    for (size_t i = 0; i < yb.size(); ++i) {
      if (std::isnan(ref[i]))
        EXPECT_EQ(yb[i] & 0x7FC0, 0x7FC0) << n << " " << i;
      else
        ASSERT_EQ(yb[i], nx::floatToBf16(ref[i])) << n << " " << i;
    }
  }
}

TEST(QuantizeKernels, MainKvScaleIsADivisionBySix) {
  // The only fp32 amax values (of all 2^31) where e4m3(amax / 6) differs
  // from e4m3(amax * fp32(1/6)): 0x1.c7fffep{-4..10}. No bf16 amax does, so
  // only f32 input can tell the two apart.
  const int64_t dim = 16, bytes = 9;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildQuantizeRowsKernel(m, "q32", RowFormat::MainKvFp4, dim,
                            mlir::Float32Type::get(m.getContext()));
  });
  auto *kernel = reinterpret_cast<QuantizeF32Fn>(lib.symbol("q32"));
  ASSERT_NE(kernel, nullptr);
  const int64_t rows = 15;
  std::vector<float> x(size_t(rows * dim));
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = std::ldexp(0x1.c7fffep0f, int(r) - 4);
    for (int64_t c = 0; c < dim; ++c)
      x[size_t(r * dim + c)] = unit(gen) * amax;
    x[size_t(r * dim + r % dim)] = (r & 1) ? -amax : amax;
    ASSERT_NE(nx::encodeE4M3(amax / 6.f), nx::encodeE4M3(amax * nx::kFp4MaxInv));
  }
  std::vector<uint8_t> out(size_t(rows * bytes));
  auto dx = describe<2>(x, {rows, dim});
  auto dout = describe<2>(out, {rows, bytes});
  kernel(&dx, &dout);
  EXPECT_EQ(out, referenceRows(RowFormat::MainKvFp4, x, dim));
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(int(out[size_t(r * bytes + 8)]),
              int(nx::encodeE4M3(std::ldexp(0x1.c7fffep0f, int(r) - 4) / 6.f)))
        << "row " << r;
}

TEST(QuantizeKernels, DequantizeMatchesNumericsBitForBit) {
  KernelLibrary lib([](mlir::ModuleOp m) {
    mlir::Type f32 = mlir::Float32Type::get(m.getContext());
    for (const Case &c : kCases) {
      buildDequantizeRowsKernel(m, std::string("dq_") + c.name, c.format, c.dim);
      buildDequantizeRowsKernel(m, std::string("dq32_") + c.name, c.format,
                                c.dim, f32);
    }
  });
  for (const Case &c : kCases) {
    auto *toBf16Kernel =
        reinterpret_cast<DequantizeFn>(lib.symbol(std::string("dq_") + c.name));
    auto *toF32Kernel =
        reinterpret_cast<DequantizeF32Fn>(lib.symbol(std::string("dq32_") + c.name));
    ASSERT_NE(toBf16Kernel, nullptr);
    ASSERT_NE(toF32Kernel, nullptr);
    const size_t dim = size_t(c.dim), bytes = nx::rowBytes(c.format, dim);
    // Rows the quantizer writes, then arbitrary bytes (every code, NaN
    // codes, scale 2^-127 included).
    Coverage cov;
    const int64_t rows = 64;
    std::vector<uint8_t> quantized =
        referenceRows(c.format, makeRows(c.format, c.dim, rows, 31, cov), c.dim);
    std::vector<uint8_t> random(size_t(rows) * bytes);
    std::mt19937 gen(32);
    for (uint8_t &v : random)
      v = uint8_t(gen());
    // Every format's NaN scale codes and special scales, in row 0..3.
    const size_t scales = nx::rowScaleOffset(c.format, dim);
    const uint8_t special[] = {0xFF, 0x7F, 0x00, 0x80};
    for (size_t r = 0; r < 4; ++r)
      random[r * bytes + scales] = special[r];
    for (bool fromQuantizer : {true, false}) {
      std::vector<uint8_t> &in = fromQuantizer ? quantized : random;
      std::vector<uint16_t> y(size_t(rows) * dim, 0xFFFF);
      std::vector<float> y32(size_t(rows) * dim, -1.f);
      auto din = describe<2>(in, {rows, int64_t(bytes)});
      auto dy = describe<2>(y, {rows, c.dim});
      auto dy32 = describe<2>(y32, {rows, c.dim});
      toBf16Kernel(&din, &dy);
      toF32Kernel(&din, &dy32);
      std::vector<float> expected(dim);
      size_t nans = 0;
      for (int64_t r = 0; r < rows; ++r) {
        nx::dequantizeRow(c.format, &in[size_t(r) * bytes], dim, expected.data());
        for (size_t i = 0; i < dim; ++i) {
          float want = expected[i], got32 = y32[size_t(r) * dim + i];
          uint16_t got = y[size_t(r) * dim + i];
          nans += std::isnan(want);
          // Quantized rows: NaN only from NaN elements of SWA rows (E4M3
          // keeps NaN; E2M1 encodes it as +0 and scales are never NaN).
          ASSERT_TRUE(sameBits(got32, want))
              << c.name << " row " << r << " element " << i << ": " << got32
              << " vs " << want;
          ASSERT_TRUE(sameBits(nx::bf16ToFloat(got),
                               nx::bf16ToFloat(nx::floatToBf16(want))))
              << c.name << " row " << r << " element " << i;
          if (fromQuantizer && !std::isnan(want)) { // exact in bf16
            ASSERT_EQ(nx::floatBits(nx::bf16ToFloat(got)), nx::floatBits(want))
                << c.name << " row " << r << " element " << i;
          }
        }
      }
      if (fromQuantizer && c.format != RowFormat::SwaKvFp8)
        EXPECT_EQ(nans, 0u) << c.name;
      else
        EXPECT_GT(nans, 0u) << c.name;
    }
  }
}

/// Fills `n` rows of `bytes` with a pattern telling (tag, row) apart.
std::vector<uint8_t> taggedRows(int64_t n, int64_t bytes, uint8_t tag) {
  std::vector<uint8_t> rows(size_t(n * bytes));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < bytes; ++c)
      rows[size_t(r * bytes + c)] = uint8_t(tag * 37 + r * 11 + c);
  return rows;
}

TEST(QuantizeKernels, CacheAppendLinearAndRing) {
  constexpr int64_t window = 8;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildCacheAppendKernel(m, "append_main", RowFormat::MainKvFp4, 512);
    buildCacheAppendKernel(m, "append_index", RowFormat::IndexKeyFp4, 128);
    buildCacheAppendKernel(m, "append_swa", RowFormat::SwaKvFp8, 512, window);
  });
  struct Call {
    const char *kernel;
    RowFormat format;
    int64_t dim, window, capacity, start, n;
  };
  const Call calls[] = {
      {"append_main", RowFormat::MainKvFp4, 512, 0, 10, 3, 4},    // inside
      {"append_main", RowFormat::MainKvFp4, 512, 0, 10, 0, 10},   // exactly full
      {"append_main", RowFormat::MainKvFp4, 512, 0, 10, 8, 4},    // 2 beyond
      {"append_main", RowFormat::MainKvFp4, 512, 0, 10, 12, 3},   // all beyond
      {"append_main", RowFormat::MainKvFp4, 512, 0, 10, -2, 4},   // 2 before
      {"append_index", RowFormat::IndexKeyFp4, 128, 0, 6, 5, 1},  // last entry
      {"append_index", RowFormat::IndexKeyFp4, 128, 0, 6, 2, 0},  // nothing
      {"append_swa", RowFormat::SwaKvFp8, 512, window, 8, 6, 5},  // wraps
      {"append_swa", RowFormat::SwaKvFp8, 512, window, 8, 13, 11}, // > window
      {"append_swa", RowFormat::SwaKvFp8, 512, window, 8, 1000003, 1},
      {"append_swa", RowFormat::SwaKvFp8, 512, window, 6, 4, 4},  // short ring
  };
  int callIndex = 0;
  for (const Call &call : calls) {
    auto *kernel = reinterpret_cast<AppendFn>(lib.symbol(call.kernel));
    ASSERT_NE(kernel, nullptr);
    const int64_t bytes = int64_t(nx::rowBytes(call.format, size_t(call.dim)));
    std::vector<uint8_t> rows = taggedRows(call.n, bytes, uint8_t(callIndex));
    std::vector<uint8_t> cache(size_t(call.capacity * bytes), 0xEE);
    std::vector<uint8_t> expected = cache;
    int32_t expectedDropped = 0;
    for (int64_t i = 0; i < call.n; ++i) {
      int64_t pos = call.start + i;
      int64_t slot = call.window ? pos % call.window : pos;
      if (pos < 0 || slot >= call.capacity) {
        ++expectedDropped;
        continue;
      }
      std::memcpy(&expected[size_t(slot * bytes)], &rows[size_t(i * bytes)],
                  size_t(bytes));
    }
    auto drows = describe<2>(rows, {call.n, bytes});
    auto dcache = describe<2>(cache, {call.capacity, bytes});
    int32_t dropped = kernel(&drows, &dcache, call.start);
    EXPECT_EQ(dropped, expectedDropped) << "call " << callIndex;
    EXPECT_EQ(cache, expected) << "call " << callIndex;
    ++callIndex;
  }
}

TEST(QuantizeKernels, CacheAppendIntoInterleavedRecords) {
  // A view into 356-byte records (main KV 288 B at 0, index key 68 B at 288):
  // the cache argument's row stride and offset come from the descriptor.
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildCacheAppendKernel(m, "append_main", RowFormat::MainKvFp4, 512);
    buildCacheAppendKernel(m, "append_index", RowFormat::IndexKeyFp4, 128);
  });
  auto *appendMain = reinterpret_cast<AppendFn>(lib.symbol("append_main"));
  auto *appendIndex = reinterpret_cast<AppendFn>(lib.symbol("append_index"));
  ASSERT_NE(appendMain, nullptr);
  ASSERT_NE(appendIndex, nullptr);
  constexpr int64_t record = 356, entries = 7;
  std::vector<uint8_t> cache(size_t(record * entries), 0xEE);
  std::vector<uint8_t> mainRows = taggedRows(3, 288, 1);
  std::vector<uint8_t> indexRows = taggedRows(3, 68, 2);
  Descriptor<2, uint8_t> mainView{cache.data(), cache.data(), 0, {entries, 288},
                                  {record, 1}};
  Descriptor<2, uint8_t> indexView{cache.data(), cache.data(), 288,
                                   {entries, 68}, {record, 1}};
  auto dm = describe<2>(mainRows, {3, 288});
  auto di = describe<2>(indexRows, {3, 68});
  EXPECT_EQ(appendMain(&dm, &mainView, 2), 0);
  EXPECT_EQ(appendIndex(&di, &indexView, 2), 0);
  for (int64_t e = 0; e < entries; ++e) {
    const uint8_t *rec = &cache[size_t(e * record)];
    bool written = e >= 2 && e < 5;
    for (int64_t c = 0; c < record; ++c) {
      uint8_t want = 0xEE;
      if (written)
        want = c < 288 ? mainRows[size_t((e - 2) * 288 + c)]
                       : indexRows[size_t((e - 2) * 68 + c - 288)];
      ASSERT_EQ(int(rec[c]), int(want)) << "entry " << e << " byte " << c;
    }
  }
}

TEST(QuantizeKernels, RoundTripThroughTheCache) {
  // quantize -> append into a ring -> dequantize the ring, all generated.
  constexpr int64_t dim = 512, window = 4, n = 6;
  KernelLibrary lib([](mlir::ModuleOp m) {
    buildQuantizeRowsKernel(m, "q", RowFormat::SwaKvFp8, dim);
    buildCacheAppendKernel(m, "append", RowFormat::SwaKvFp8, dim, window);
    buildDequantizeRowsKernel(m, "dq", RowFormat::SwaKvFp8, dim);
  });
  auto *q = reinterpret_cast<QuantizeFn>(lib.symbol("q"));
  auto *append = reinterpret_cast<AppendFn>(lib.symbol("append"));
  auto *dq = reinterpret_cast<DequantizeFn>(lib.symbol("dq"));
  ASSERT_TRUE(q && append && dq);
  const int64_t bytes = 528;
  std::vector<uint16_t> x = randomBf16(size_t(n * dim), 41);
  std::vector<uint8_t> rows(size_t(n * bytes)), ring(size_t(window * bytes));
  std::vector<uint16_t> y(size_t(window * dim));
  auto dx = describe<2>(x, {n, dim});
  auto drows = describe<2>(rows, {n, bytes});
  auto dring = describe<2>(ring, {window, bytes});
  auto dy = describe<2>(y, {window, dim});
  q(&dx, &drows);
  EXPECT_EQ(append(&drows, &dring, 1), 0); // positions 1..6: slots 1,2,3,0,1,2
  dq(&dring, &dy);
  std::vector<float> in(dim), want(dim);
  std::vector<uint8_t> row(static_cast<size_t>(bytes));
  for (int64_t slot = 0; slot < window; ++slot) {
    // Slot s holds the last position p in [1, 6] with p % 4 == s.
    int64_t p = slot + 4 <= 6 ? slot + 4 : slot;
    int64_t i = p - 1;
    for (int64_t c = 0; c < dim; ++c)
      in[size_t(c)] = nx::bf16ToFloat(x[size_t(i * dim + c)]);
    nx::quantizeRow(RowFormat::SwaKvFp8, in.data(), dim, row.data());
    nx::dequantizeRow(RowFormat::SwaKvFp8, row.data(), dim, want.data());
    for (int64_t c = 0; c < dim; ++c)
      ASSERT_EQ(nx::floatBits(nx::bf16ToFloat(y[size_t(slot * dim + c)])),
                nx::floatBits(want[size_t(c)]))
          << "slot " << slot << " channel " << c;
  }
}

TEST(QuantizeKernels, RejectsDimsThatAreNotWholeGroups) {
  mlir::MLIRContext context;
  loadHostKernelDialects(context);
  auto module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    message = d.str();
    return mlir::success();
  });
  EXPECT_FALSE(buildQuantizeRowsKernel(module, "bad", RowFormat::MainKvFp4, 40));
  EXPECT_NE(message.find("multiple of the group 16"), std::string::npos)
      << message;
  EXPECT_FALSE(buildDequantizeRowsKernel(module, "bad", RowFormat::SwaKvFp8, 48));
  EXPECT_FALSE(buildCacheAppendKernel(module, "bad", RowFormat::IndexKeyFp4, 0));
  EXPECT_FALSE(buildQuantizeRowsKernel(module, "bad", RowFormat::SwaKvFp8, 64,
                                       mlir::IntegerType::get(&context, 16)));
  EXPECT_TRUE(module.getBody()->empty());
  module->erase();
}

TEST(QuantizeKernels, CodecsAreIntegerArithmeticInLLVMIR) {
  mlir::MLIRContext context;
  loadHostKernelDialects(context);
  auto module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  buildQuantizeRowsKernel(module, "q", RowFormat::MainKvFp4, 512);
  buildDequantizeRowsKernel(module, "dq", RowFormat::IndexKeyFp4, 128);
  buildCacheAppendKernel(module, "append", RowFormat::SwaKvFp8, 512, 128);
  ASSERT_TRUE(mlir::succeeded(mlir::verify(module)));
  ASSERT_TRUE(mlir::succeeded(lowerHostKernelsToLLVM(module)));
  auto ir = translateToLLVMIR(module);
  ASSERT_TRUE(bool(ir)) << llvm::toString(ir.takeError());
  EXPECT_NE(ir->find("define void @_mlir_ciface_q("), std::string::npos);
  EXPECT_NE(ir->find("define void @_mlir_ciface_dq("), std::string::npos);
  EXPECT_NE(ir->find("define i32 @_mlir_ciface_append("), std::string::npos);
  EXPECT_NE(ir->find("fdiv float"), std::string::npos); // x / s, amax / 6
  EXPECT_EQ(ir->find("fptrunc"), std::string::npos);
  // No library calls: the only declarations are LLVM intrinsics.
  for (size_t at = ir->find("declare "); at != std::string::npos;
       at = ir->find("declare ", at + 1)) {
    std::string line = ir->substr(at, ir->find('\n', at) - at);
    EXPECT_NE(line.find("@llvm."), std::string::npos) << line;
  }
  module->erase();
}

} // namespace
} // namespace csa::codegen
