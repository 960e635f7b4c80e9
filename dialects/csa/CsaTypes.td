//===- CsaTypes.td - csa types -----------------------------*- tablegen -*-===//
#ifndef CSA_DIALECTS_CSA_CSATYPES_TD
#define CSA_DIALECTS_CSA_CSATYPES_TD

include "dialects/csa/CsaAttrs.td"
include "dialects/csa/CsaTypeInterfaces.td"

//===----------------------------------------------------------------------===//
// Cache row formats
//===----------------------------------------------------------------------===//

def Csa_Fp4RowType : Csa_Type<"Fp4Row", "fp4_row", [Csa_CacheRowTypeInterface]> {
  let summary = "a cache row of packed E2M1 values with per-group scales";
  let description = [{
    `dim` E2M1 values packed two per byte (element 2i in the low nibble,
    2i+1 in the high nibble), followed by one scale byte per `group` channels
    in `scale` format. Size: dim/2 + dim/group bytes.

    Released formats:
    * main KV (`V41_FP4`): `!csa.fp4_row<512, e4m3, 16>`, 256 + 32 = 288 B;
      scale = e4m3(max(amax, 6*2^-9) / 6).
    * index keys: `!csa.fp4_row<128, ue8m0, 32>`, 64 + 4 = 68 B; scale is the
      power of two 2^ceil(log2(max(amax, 6*2^-126) / 6)).

    Tensors of rows (`tensor<?x!csa.fp4_row<512, e4m3, 16>>`) are what
    `csa.quantize` produces and caches hold.
  }];
  let parameters = (ins "int64_t":$dim, "::csa::ScaleFormat":$scale,
                        "int64_t":$group);
  let assemblyFormat = "`<` $dim `,` $scale `,` $group `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bytes of one row: packed values, then scales.
    int64_t getBytes() const { return getDim() / 2 + getDim() / getGroup(); }
  }];
}

def Csa_Fp8RowType : Csa_Type<"Fp8Row", "fp8_row", [Csa_CacheRowTypeInterface]> {
  let summary = "a cache row of E4M3 values with per-group scales";
  let description = [{
    `dim` E4M3 bytes followed by one scale per `group` channels: a byte
    (`ue8m0`) or a little-endian fp32 (`f32`).
    Size: dim + dim/group x (1 or 4) bytes.

    Released SWA format (`V41`): `!csa.fp8_row<512, ue8m0, 32>`,
    512 + 16 = 528 B; scale = 2^ceil(log2(max(amax, 1e-4) / 448)), values
    rounded to nearest even with saturation. RoPE channels are quantized too.

    FP8 index keys (a variant, `csa-compile --index-key-format=fp8`):
    `!csa.fp8_row<128, f32, 128>`, 128 + 4 = 132 B; scale =
    max(amax, 1e-4) * fp32(1/448).
  }];
  let parameters = (ins "int64_t":$dim, "::csa::ScaleFormat":$scale,
                        "int64_t":$group);
  let assemblyFormat = "`<` $dim `,` $scale `,` $group `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getBytes() const {
      return getDim() + getDim() / getGroup() * (getScale() == ScaleFormat::F32 ? 4 : 1);
    }
  }];
}

def Csa_Fp8NopeRowType : Csa_Type<"Fp8NopeRow", "fp8_nope_row",
                                   [Csa_CacheRowTypeInterface]> {
  let summary = "V4's main-KV row: E4M3 NoPE channels, bf16 RoPE channels";
  let description = [{
    The main-KV format of DeepSeek-V4 (`V4`, FlashMLA's MODEL1_FP8Sparse),
    a cache format variant (`csa-compile --main-kv-format=fp8`): the first
    `dim - rope` (NoPE) channels as E4M3 bytes, the last `rope` channels as
    bf16 (two bytes each, little-endian), then one `scale` byte per `group`
    NoPE channels, padded with zeros to a multiple of 8. Scale =
    2^ceil(log2(max(amax, 1e-4) / 448)), values rounded to nearest even with
    saturation (`act_quant(kv[..., :-rope], group, "ue8m0")`).

    Size: (dim - rope) + 2 rope + roundup8((dim - rope) / group) bytes.

    Example (the released widths: 448 + 128 + 7 + 1 = 584 B):
    ```mlir
    !csa.fp8_nope_row<512, rope 64, ue8m0, 64>
    ```
  }];
  let parameters = (ins "int64_t":$dim, "int64_t":$rope,
                        "::csa::ScaleFormat":$scale, "int64_t":$group);
  let assemblyFormat = "`<` $dim `,` `rope` $rope `,` $scale `,` $group `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getNope() const { return getDim() - getRope(); }
    /// Offset of the first scale byte: the NoPE bytes and the bf16 RoPE pairs.
    int64_t getScaleOffset() const { return getNope() + 2 * getRope(); }
    int64_t getBytes() const {
      return getScaleOffset() + (getNope() / getGroup() + 7) / 8 * 8;
    }
  }];
}

/// A main-KV row: the released FP4 row or V4's FP8 NoPE row.
def Csa_MainKvRowType : AnyTypeOf<[Csa_Fp4RowType, Csa_Fp8NopeRowType]>;

//===----------------------------------------------------------------------===//
// State handles
//===----------------------------------------------------------------------===//

def Csa_GlobalCacheType : Csa_Type<"GlobalCache", "global_cache"> {
  let summary = "the global (compressed) KV cache of a Full layer";
  let description = [{
    One entry per `ratio` tokens, each a main-KV row plus an index-key row.
    The main row is `!csa.fp4_row<dim, e4m3, 16>` (released) or
    `!csa.fp8_nope_row` (V4's format, a variant); the index row
    `!csa.fp4_row<dim, ue8m0, 32>` (released) or `!csa.fp8_row<dim, f32, dim>`
    (a variant).
    This is the only cache that grows with the context; Reuse and Reindex
    layers read a Full layer's cache and store nothing global.

    Example (layer 2 of the released model: 356 B per entry, 178 B/token):
    ```mlir
    !csa.global_cache<2, !csa.fp4_row<512, e4m3, 16>, !csa.fp4_row<128, ue8m0, 32>>
    ```
  }];
  let parameters = (ins "int64_t":$ratio, "::csa::CacheRowTypeInterface":$main_row,
                        "::csa::CacheRowTypeInterface":$index_row);
  let assemblyFormat = "`<` $ratio `,` qualified($main_row) `,` qualified($index_row) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getEntryBytes() const {
      return getMainRow().getBytes() + getIndexRow().getBytes();
    }
    /// Bytes per token of context: entry bytes x entries per token.
    double getBytesPerToken() const {
      return double(getEntryBytes()) / double(getRatio());
    }
  }];
}

def Csa_SwaRingType : Csa_Type<"SwaRing", "swa_ring"> {
  let summary = "a layer's sliding-window ring of the last `window` KV rows";
  let description = [{
    Slot p % window holds the row of position p. Constant size per sequence.

    Example: `!csa.swa_ring<128, !csa.fp8_row<512, ue8m0, 32>>` (67584 B).
  }];
  let parameters = (ins "int64_t":$window, "::csa::Fp8RowType":$row);
  let assemblyFormat = "`<` $window `,` qualified($row) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getBytes() const { return getWindow() * getRow().getBytes(); }
  }];
}

def Csa_CompressorStateType : Csa_Type<"CompressorState", "compressor_state"> {
  let summary = "the partial-group state of a ratio > 1 compressor";
  let description = [{
    The projected KV and gate scores (fp32) of the tokens of the group that
    is not yet complete: `ratio` slots of `dim` channels each, for both.
    Token p goes to slot p % ratio; the group completes when slot ratio-1 is
    written. A ratio-1 compressor has no state.

    Example: `!csa.compressor_state<2, 512>` (8 KiB per sequence).
  }];
  let parameters = (ins "int64_t":$ratio, "int64_t":$dim);
  let assemblyFormat = "`<` $ratio `,` $dim `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getBytes() const { return 2 * getRatio() * getDim() * 4; }
  }];
}

def Csa_TopKType : Csa_Type<"TopK", "topk"> {
  let summary = "a per-step set of selected compressed positions per query";
  let description = [{
    For each query position of the call that made it, up to `k` positions
    of a global cache, ascending, padded with -1. A reader answers each of
    its queries with the row of that query's position, so a layer that runs
    on the last rows only (bounded replay) reads its source's rows for those
    positions. Transient: never cached across steps.

    Example: `!csa.topk<512>`.
  }];
  let parameters = (ins "int64_t":$k);
  let assemblyFormat = "`<` $k `>`";
  let genVerifyDecl = 1;
}

def Csa_CandidatePoolType : Csa_Type<"CandidatePool", "candidate_pool"> {
  let summary = "an HSI candidate pool: selected blocks of compressed positions";
  let description = [{
    Per query position, up to `blocks` blocks of `block_size` consecutive
    compressed positions. Reindex layers score only inside it, each query in
    the pool of its own position (as `!csa.topk` is read).

    Example: `!csa.candidate_pool<2048, 8>`.
  }];
  let parameters = (ins "int64_t":$blocks, "int64_t":$block_size);
  let assemblyFormat = "`<` $blocks `,` $block_size `>`";
  let genVerifyDecl = 1;
}

def Csa_CacheHandle : AnyTypeOf<[Csa_GlobalCacheType, Csa_SwaRingType,
                                 Csa_CompressorStateType]>;

#endif // CSA_DIALECTS_CSA_CSATYPES_TD
