//===- BuiltinKernels.cpp - The CUDA device's own small kernels -----------===//
#include "runtime/device/cuda/BuiltinKernels.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace csa::device {

namespace {

constexpr int kInlineWords = int(kInlineBytes / 8);

/// Every kernel's first instructions, as the generated kernels' (NvptxBackend:
/// programmatic dependent launch): wait for the grids before, then let the
/// next one's blocks be scheduled.
const char *kDependentLaunch = "  griddepcontrol.wait;\n  griddepcontrol.launch_dependents;\n";

/// i = ctaid.x * ntid.x + tid.x into %i, the grid's thread count into %s.
const char *kGridStride = R"(  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %nctaid.x;
  mul.wide.u32 %i, %r2, %r3;
  cvt.u64.u32 %t, %r1;
  add.u64 %i, %i, %t;
  mul.wide.u32 %s, %r4, %r3;
)";

std::string generate() {
  std::ostringstream o;
  o << ".version 8.0\n.target sm_90a\n.address_size 64\n\n";
  // One thread stores the bytes its parameters carry, byte by byte (dst
  // need not be aligned), and stops at `bytes`.
  o << ".visible .entry csa_write_inline(\n  .param .u64 p_dst,\n  .param .u64 p_bytes";
  for (int w = 0; w < kInlineWords; ++w)
    o << ",\n  .param .u64 p_w" << w;
  o << ")\n{\n  .reg .pred %p;\n  .reg .b32 %r;\n  .reg .b64 %d, %n, %w, %v;\n"
    << kDependentLaunch << "  ld.param.u64 %d, [p_dst];\n  ld.param.u64 %n, [p_bytes];\n";
  for (int w = 0; w < kInlineWords; ++w) {
    o << "  ld.param.u64 %w, [p_w" << w << "];\n";
    for (int b = 0; b < 8; ++b) {
      const int k = w * 8 + b;
      o << "  setp.le.u64 %p, %n, " << k << ";\n  @%p bra DONE;\n"
        << "  shr.u64 %v, %w, " << 8 * b << ";\n  cvt.u32.u64 %r, %v;\n"
        << "  st.global.u8 [%d+" << k << "], %r;\n";
    }
  }
  o << "DONE:\n  ret;\n}\n\n";
  // Grid-stride fills and copies: element i of `count` (a byte, or a
  // 16-byte vector of four u32).
  auto kernel = [&](const char *name, bool copy, bool vector) {
    o << ".visible .entry " << name << "(\n  .param .u64 p_dst,\n  .param .u64 "
      << (copy ? "p_src" : "p_count") << ",\n  .param .u64 " << (copy ? "p_count" : "p_value")
      << ")\n{\n  .reg .pred %p;\n  .reg .b32 %r<5>;\n  .reg .b32 %x<4>;\n"
         "  .reg .b64 %d, %src, %n, %v, %i, %s, %t, %a, %b;\n"
      << kDependentLaunch << "  ld.param.u64 %d, [p_dst];\n  ld.param.u64 %n, [p_count];\n";
    if (copy)
      o << "  ld.param.u64 %src, [p_src];\n";
    else
      o << "  ld.param.u64 %v, [p_value];\n  cvt.u32.u64 %x0, %v;\n";
    o << kGridStride << "LOOP:\n  setp.ge.u64 %p, %i, %n;\n  @%p bra DONE;\n";
    if (vector)
      o << "  shl.b64 %t, %i, 4;\n";
    else
      o << "  mov.u64 %t, %i;\n";
    o << "  add.u64 %a, %d, %t;\n";
    if (copy) {
      o << "  add.u64 %b, %src, %t;\n";
      if (vector)
        o << "  ld.global.v4.u32 {%x0, %x1, %x2, %x3}, [%b];\n"
             "  st.global.v4.u32 [%a], {%x0, %x1, %x2, %x3};\n";
      else
        o << "  ld.global.u8 %x0, [%b];\n  st.global.u8 [%a], %x0;\n";
    } else {
      if (vector)
        o << "  st.global.v4.u32 [%a], {%x0, %x0, %x0, %x0};\n";
      else
        o << "  st.global.u8 [%a], %x0;\n";
    }
    o << "  add.u64 %i, %i, %s;\n  bra.uni LOOP;\nDONE:\n  ret;\n}\n\n";
  };
  // Rows: element i of rows x width bytes is byte i % width of row
  // i / width (rows `pitch` bytes apart on each side).
  o << ".visible .entry csa_copy_rows(\n  .param .u64 p_dst,\n  .param .u64 p_dst_pitch,\n"
       "  .param .u64 p_src,\n  .param .u64 p_src_pitch,\n  .param .u64 p_width,\n"
       "  .param .u64 p_count)\n{\n  .reg .pred %p;\n  .reg .b32 %r<5>;\n  .reg .b32 %x0;\n"
       "  .reg .b64 %d, %dp, %src, %sp, %w, %n, %i, %s, %t, %row, %col, %a, %b;\n"
    << kDependentLaunch
    << "  ld.param.u64 %d, [p_dst];\n  ld.param.u64 %dp, [p_dst_pitch];\n"
       "  ld.param.u64 %src, [p_src];\n  ld.param.u64 %sp, [p_src_pitch];\n"
       "  ld.param.u64 %w, [p_width];\n  ld.param.u64 %n, [p_count];\n"
    << kGridStride
    << "LOOP:\n  setp.ge.u64 %p, %i, %n;\n  @%p bra DONE;\n"
       "  div.u64 %row, %i, %w;\n  mul.lo.u64 %t, %row, %w;\n  sub.u64 %col, %i, %t;\n"
       "  mad.lo.u64 %a, %row, %dp, %d;\n  add.u64 %a, %a, %col;\n"
       "  mad.lo.u64 %b, %row, %sp, %src;\n  add.u64 %b, %b, %col;\n"
       "  ld.global.u8 %x0, [%b];\n  st.global.u8 [%a], %x0;\n"
       "  add.u64 %i, %i, %s;\n  bra.uni LOOP;\nDONE:\n  ret;\n}\n\n";
  kernel("csa_fill_u8", false, false);
  kernel("csa_fill_v4", false, true);
  kernel("csa_copy_u8", true, false);
  kernel("csa_copy_v4", true, true);
  return o.str();
}

/// A grid of kBuiltinBlock-thread blocks for `count` elements (at most 4096
/// blocks; the kernels stride over the rest).
cuda::LaunchShape gridFor(size_t count) {
  cuda::LaunchShape shape;
  shape.blockX = kBuiltinBlock;
  shape.gridX = unsigned(std::clamp<size_t>((count + kBuiltinBlock - 1) / kBuiltinBlock, 1, 4096));
  return shape;
}

} // namespace

const std::string &builtinKernelsPtx() {
  static const std::string ptx = generate();
  return ptx;
}

cuda::KernelLaunch writeInlineLaunch(cuda::Function fn, cuda::DevicePtr dst, const void *src,
                                     size_t bytes) {
  cuda::KernelLaunch k;
  k.fn = fn;
  k.params.assign(2 + kInlineWords, 0);
  k.params[0] = dst;
  k.params[1] = std::min(bytes, kInlineBytes);
  std::memcpy(&k.params[2], src, std::min(bytes, kInlineBytes));
  return k;
}

cuda::KernelLaunch fillLaunch(cuda::Function u8, cuda::Function v4, cuda::DevicePtr dst,
                              uint8_t byte, size_t bytes) {
  const bool vector = dst % 16 == 0 && bytes % 16 == 0;
  const size_t count = vector ? bytes / 16 : bytes;
  cuda::KernelLaunch k;
  k.fn = vector ? v4 : u8;
  k.shape = gridFor(count);
  k.params = {dst, count, uint64_t(byte) * 0x01010101u};
  return k;
}

cuda::KernelLaunch copyRowsLaunch(cuda::Function fn, cuda::DevicePtr dst, size_t dstPitch,
                                  cuda::DevicePtr src, size_t srcPitch, size_t width,
                                  size_t rows) {
  cuda::KernelLaunch k;
  k.fn = fn;
  k.shape = gridFor(width * rows);
  k.params = {dst, dstPitch, src, srcPitch, width, width * rows};
  return k;
}

cuda::KernelLaunch copyLaunch(cuda::Function u8, cuda::Function v4, cuda::DevicePtr dst,
                              cuda::DevicePtr src, size_t bytes) {
  const bool vector = dst % 16 == 0 && src % 16 == 0 && bytes % 16 == 0;
  const size_t count = vector ? bytes / 16 : bytes;
  cuda::KernelLaunch k;
  k.fn = vector ? v4 : u8;
  k.shape = gridFor(count);
  k.params = {dst, src, count};
  return k;
}

} // namespace csa::device
