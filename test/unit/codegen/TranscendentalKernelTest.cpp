//===- TranscendentalKernelTest.cpp - emitted exp/log1p/sincos ------------===//
//
// The arith sequences codegen emits for exp32, log1p32 and sincos32 must give
// the numerics library's bits on every input: random f32 bit patterns (all
// exponents, NaNs and infinities included) and the special values.
//
//===----------------------------------------------------------------------===//

#include "KernelTestSupport.h"

#include "codegen/host/KernelBuilder.h"
#include "codegen/host/Transcendental.h"

#include <cstring>

using namespace csa::codegen;
using namespace csa::codegen::testing;
using namespace mlir;

namespace {
/// Kernels (in, out, out2): out[i] = f(in[i]); sincos writes cos to out2.
/// (Not named exp or log1p: the symbols would bind to libm's.)
void buildElementwise(ModuleOp m) {
  OpBuilder b(m.getContext());
  Location loc = m.getLoc();
  auto vec = MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
  using Body = std::function<void(KernelBuilder &, func::FuncOp, Value, Value)>;
  auto build = [&](const char *name, const Body &body) {
    auto fn = KernelBuilder::start(b, m, name, {vec, vec, vec});
    KernelBuilder k(b, loc);
    k.loop(k.idx(0), k.dim(fn.getArgument(0), 0), [&](Value i) {
      body(k, fn, k.load(fn.getArgument(0), {i}), i);
    });
    k.finish();
  };
  build("exp32_elementwise", [](KernelBuilder &k, func::FuncOp fn, Value x, Value i) {
    k.store(emitExp32(k.b, k.loc, x), fn.getArgument(1), {i});
  });
  build("log1p32_elementwise", [](KernelBuilder &k, func::FuncOp fn, Value x, Value i) {
    k.store(emitLog1p32(k.b, k.loc, x), fn.getArgument(1), {i});
  });
  build("sincos32_elementwise", [](KernelBuilder &k, func::FuncOp fn, Value x, Value i) {
    auto sc = emitSinCos32(k.b, k.loc, x);
    k.store(sc.first, fn.getArgument(1), {i});
    k.store(sc.second, fn.getArgument(2), {i});
  });
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
} // namespace

TEST(TranscendentalKernels, EmittedSequencesGiveTheNumericsLibrarysBits) {
  KernelLibrary lib(buildElementwise);
  using Fn = void (*)(Descriptor<1, float> *, Descriptor<1, float> *,
                      Descriptor<1, float> *);
  auto *exp = reinterpret_cast<Fn>(lib.symbol("exp32_elementwise"));
  auto *log1p = reinterpret_cast<Fn>(lib.symbol("log1p32_elementwise"));
  auto *sincos = reinterpret_cast<Fn>(lib.symbol("sincos32_elementwise"));
  ASSERT_TRUE(exp && log1p && sincos);

  std::vector<float> in;
  std::mt19937 gen(5);
  std::uniform_int_distribution<uint32_t> anyBits;
  for (int i = 0; i < 1 << 20; ++i) {
    const uint32_t bits = anyBits(gen);
    float f;
    std::memcpy(&f, &bits, 4);
    in.push_back(f);
  }
  // Values in the functions' working ranges, and the edges.
  std::uniform_real_distribution<float> expRange(-110.f, 95.f), angle(-2e6f, 2e6f);
  for (int i = 0; i < 1 << 18; ++i) {
    in.push_back(expRange(gen));
    in.push_back(angle(gen));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.f, -0.f, 1.f, -1.f, inf, -inf, std::nanf(""), 89.f, -104.f,
                  1e-30f, -0.999999f, 3e38f, -3e38f})
    in.push_back(f);

  const int64_t n = int64_t(in.size());
  std::vector<float> out(in.size()), out2(in.size());
  auto din = describe<1>(in, {n}), dout = describe<1>(out, {n}),
       dout2 = describe<1>(out2, {n});
  auto same = [](float got, float want) {
    return bitsOf(got) == bitsOf(want) || (std::isnan(got) && std::isnan(want));
  };
  exp(&din, &dout, &dout2);
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_TRUE(same(out[i], csa::numerics::exp32(in[i])))
        << "exp(" << in[i] << "): " << out[i];
  log1p(&din, &dout, &dout2);
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_TRUE(same(out[i], csa::numerics::log1p32(in[i])))
        << "log1p(" << in[i] << "): " << out[i];
  sincos(&din, &dout, &dout2);
  for (size_t i = 0; i < in.size(); ++i) {
    float s, c;
    csa::numerics::sincos32(in[i], s, c);
    ASSERT_TRUE(same(out[i], s)) << "sin(" << in[i] << "): " << out[i];
    ASSERT_TRUE(same(out2[i], c)) << "cos(" << in[i] << "): " << out2[i];
  }
}
