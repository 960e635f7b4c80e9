#!/usr/bin/python3
"""Expected values for test/unit/tables (csa_model_tables), from numpy.

    /usr/bin/python3 test/unit/tables/gen_expected.py > test/unit/tables/ExpectedValues.h
    /usr/bin/python3 test/unit/tables/gen_expected.py --check test/unit/tables/ExpectedValues.h

The second form exits 1 if the header differs from what this numpy prints
(test/tables/expected-values.test runs it). Nothing here uses csa's code:

  * RoPE frequencies: `precompute_freqs_cis` of the released model.py, with
    the torch fp32 tensor arithmetic done as numpy fp32 arithmetic, and the
    correction range in Python floats as model.py computes it; the tiny and
    released tables (base and compressed/YaRN) from models/configs/*.json.
  * numpy's random machinery: SeedSequence pools and generate_state, PCG64
    states and raw outputs, Generator.integers(..., dtype=np.int64) on each
    of numpy's paths (no draw, raw 32-bit, 32-bit Lemire, raw 64-bit,
    64-bit Lemire, with rejections).
  * Engram constants as engram.py derives them: multipliers from
    np.random.default_rng(10007 * layer_id), primes by engram.py's own
    search (restart per (layer, order), skip the primes already taken),
    offsets and table rows; for the tiny and released configs.
"""

import json
import math
import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
INT64_MAX = int(np.iinfo(np.int64).max)


def config(name):
    with open(os.path.join(ROOT, "models", "configs", name + ".json")) as f:
        return json.load(f)


# ---- RoPE: model.py precompute_freqs_cis -----------------------------------

def find_correction_range(low_rot, high_rot, dim, base, max_seq_len):
    def find_correction_dim(num_rotations):
        return (dim * math.log(max_seq_len / (num_rotations * 2 * math.pi))
                / (2 * math.log(base)))
    low = math.floor(find_correction_dim(low_rot))
    high = math.ceil(find_correction_dim(high_rot))
    return max(low, 0), min(high, dim - 1)


def rope_freqs(dim, base, yarn):
    """yarn = (factor, original_seq_len, beta_fast, beta_slow) or None."""
    f32 = np.float32
    exponent = np.arange(0, dim, 2, dtype=f32) / f32(dim)
    # fp32 power correctly rounded (C's powf), one element at a time: numpy's
    # vectorized fp32 power (SVML on AVX-512) is off by an ulp here and there.
    powers = np.array([f32(base) ** e for e in exponent], dtype=f32)
    for e, p in zip(exponent, powers):
        assert p == f32(float(base) ** float(e)), (base, e, p)
    freqs = f32(1.0) / powers
    if yarn is None:
        return freqs, None
    factor, original, beta_fast, beta_slow = yarn
    low, high = find_correction_range(beta_fast, beta_slow, dim, base, original)
    top = high + 0.001 if low == high else high
    ramp = (np.arange(dim // 2, dtype=f32) - f32(low)) / f32(top - low)
    ramp = np.clip(ramp, f32(0), f32(1))
    smooth = f32(1) - ramp
    freqs = freqs / f32(factor) * (f32(1) - smooth) + freqs * smooth
    assert freqs.dtype == np.float32
    return freqs, (low, high)


def rope_cases():
    cases = []
    for variant, file in [("tiny", "tiny"), ("released", "deepseek-v4.1-flash")]:
        c = config(file)
        dim = c["rope_head_dim"]
        yarn = (c["rope_factor"], c["original_seq_len"], c["beta_fast"],
                c["beta_slow"])
        # SWA-only layers: rope_theta, no YaRN; compressed layers:
        # compress_rope_theta with YaRN (model.py Attention.__init__).
        cases.append((variant + " base", dim, c["rope_theta"], None))
        cases.append((variant + " compressed", dim, c["compress_rope_theta"], yarn))
    # model.py's corners: an empty ramp (low == high, widened by 0.001) and a
    # ramp that ends before it starts (high < low: no pair is scaled).
    cases.append(("empty ramp", 8, 160000, (4, 6, 32, 1)))
    cases.append(("reversed ramp", 64, 160000, (16, 1, 32, 1)))
    return cases


# ---- Engram: engram.py -----------------------------------------------------

def isprime(n):
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1 if d == 2 else 2
    return True


def find_next_prime(start, seen_primes):
    candidate = start + 1
    while True:
        if isprime(candidate) and candidate not in seen_primes:
            return candidate
        candidate += 1


def engram_primes(layer_ids, vocab_size, max_ngram_size, n_head):
    seen_primes, per_layer = set(), []
    for _ in layer_ids:
        columns = []
        for _ in range(2, max_ngram_size + 1):
            start = vocab_size - 1
            for _ in range(n_head):
                prime = find_next_prime(start, seen_primes)
                seen_primes.add(prime)
                columns.append(prime)
                start = prime
        per_layer.append(columns)
    return per_layer


def engram_multipliers(layer_id, max_ngram_size, compressed_vocab):
    half_bound = max(1, (INT64_MAX // compressed_vocab) // 2)
    g = np.random.default_rng(int(0 + 10007 * int(layer_id)))
    r = g.integers(low=0, high=half_bound, size=(max_ngram_size,), dtype=np.int64)
    return [int(v) for v in r * 2 + 1]


def engram_cases():
    cases = []
    for variant, file in [("tiny", "tiny"), ("released", "deepseek-v4.1-flash")]:
        c = config(file)
        layers = c["engram_layer_ids"]
        primes = engram_primes(layers, c["engram_vocab_size"],
                               c["engram_max_ngram_size"], c["engram_n_heads"])
        rows = [sum(p) for p in primes]
        # The config's table sizes are these sums (the released figures:
        # 384006168 and 384016682 rows).
        assert rows == c["engram_num_embeddings"], (rows, c["engram_num_embeddings"])
        mults = [engram_multipliers(l, c["engram_max_ngram_size"],
                                    c["engram_compressed_vocab_size"])
                 for l in layers]
        cases.append((variant, c, primes, mults, rows))
    return cases


# ---- C++ -------------------------------------------------------------------

def u32(v):
    return f"0x{int(v) & 0xFFFFFFFF:08x}u"


def u64(v):
    return f"0x{int(v) & 0xFFFFFFFFFFFFFFFF:016x}ull"


def i64(v):
    v = int(v)
    return "INT64_MIN" if v == -2**63 else f"{v}ll"


def f32(v):
    mantissa, exponent = float(np.float32(v)).hex().split("p")
    return mantissa.rstrip("0").rstrip(".") + "p" + exponent + "f"


def listing(values, fmt, per_line=4, indent=8):
    items = [fmt(v) for v in values]
    if len(items) <= per_line:
        return "{" + ", ".join(items) + "}"
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    pad = " " * indent
    return "{\n" + ",\n".join(pad + l for l in lines) + "}"


def header():
    out = []
    emit = out.append
    emit("//===- ExpectedValues.h - Expected values of csa_model_tables -*- C++ -*-===//")
    emit("//")
    emit("// GENERATED by test/unit/tables/gen_expected.py with numpy "
         f"{np.__version__}; do not edit.")
    emit("// Regenerate: /usr/bin/python3 test/unit/tables/gen_expected.py > "
         "test/unit/tables/ExpectedValues.h")
    emit("//")
    emit("//===----------------------------------------------------------------------===//")
    emit("#ifndef CSA_TEST_UNIT_TABLES_EXPECTEDVALUES_H")
    emit("#define CSA_TEST_UNIT_TABLES_EXPECTEDVALUES_H")
    emit("")
    emit("#include <array>")
    emit("#include <cstdint>")
    emit("#include <vector>")
    emit("")
    emit("namespace csa::tables::expected {")
    emit("")

    emit("/// model.py precompute_freqs_cis in numpy fp32 (YaRN when yarn).")
    emit("struct RopeCase {")
    emit("  const char *name;")
    emit("  int64_t dim;")
    emit("  double theta;")
    emit("  bool yarn;")
    emit("  double factor;")
    emit("  int64_t originalSeqLen;")
    emit("  double betaFast, betaSlow;")
    emit("  int64_t rampLow, rampHigh; ///< find_correction_range (YaRN only)")
    emit("  std::vector<float> freqs;")
    emit("};")
    emit("inline const std::vector<RopeCase> kRopeCases = {")
    for name, dim, theta, yarn in rope_cases():
        freqs, ramp = rope_freqs(dim, theta, yarn)
        factor, original, bf, bs = yarn if yarn else (1, 0, 0, 0)
        low, high = ramp if ramp else (0, 0)
        emit(f"    {{\"{name}\", {dim}, {float(theta)!r}, {'true' if yarn else 'false'}, "
             f"{float(factor)!r}, {original}, {float(bf)!r}, {float(bs)!r}, {low}, {high},")
        emit("     " + listing(freqs, f32, per_line=3) + "},")
    emit("};")
    emit("")

    emit("/// np.random.SeedSequence(entropy): .pool, .generate_state(4, np.uint64).")
    emit("struct SeedSequenceCase {")
    emit("  uint64_t entropy;")
    emit("  std::array<uint32_t, 4> pool;")
    emit("  std::array<uint64_t, 4> state64;")
    emit("};")
    emit("inline const std::vector<SeedSequenceCase> kSeedSequenceCases = {")
    for seed in [0, 1, 10007 * 1, 10007 * 14, 2**32 + 7, 2**64 - 1]:
        ss = np.random.SeedSequence(seed)
        pool = ", ".join(u32(w) for w in ss.pool)
        state = ", ".join(u64(w) for w in ss.generate_state(4, np.uint64))
        emit(f"    {{{u64(seed)}, {{{pool}}},")
        emit(f"     {{{state}}}}},")
    emit("};")
    emit("")

    emit("/// np.random.PCG64(seed): state and increment after seeding as")
    emit("/// {high, low}, then random_raw(6).")
    emit("struct Pcg64Case {")
    emit("  uint64_t seed;")
    emit("  std::array<uint64_t, 2> state, increment;")
    emit("  std::array<uint64_t, 6> raw;")
    emit("};")
    emit("inline const std::vector<Pcg64Case> kPcg64Cases = {")
    for seed in [0, 42, 10007 * 1, 10007 * 14]:
        bg = np.random.PCG64(seed)
        st = bg.state["state"]
        s, inc = int(st["state"]), int(st["inc"])
        raw = ", ".join(u64(v) for v in bg.random_raw(6))
        emit(f"    {{{u64(seed)}, {{{u64(s >> 64)}, {u64(s)}}}, "
             f"{{{u64(inc >> 64)}, {u64(inc)}}},")
        emit(f"     {{{raw}}}}},")
    emit("};")
    emit("")

    emit("/// np.random.default_rng(seed).integers(low, high, size=(n,), dtype=np.int64).")
    emit("struct IntegersCase {")
    emit("  uint64_t seed;")
    emit("  int64_t low, high;")
    emit("  std::vector<int64_t> values;")
    emit("};")
    emit("inline const std::vector<IntegersCase> kIntegersCases = {")
    cases = [
        (10007 * 1, 0, (INT64_MAX // 99092) // 2, 4),  # released layer 1
        (10007 * 14, 0, (INT64_MAX // 99092) // 2, 4),  # released layer 14
        (10007 * 1, 0, (INT64_MAX // 512) // 2, 3),  # tiny layer 1
        (7, 0, 1, 3),  # one value: no draws
        (7, 0, 1000, 7),  # 32-bit Lemire on buffered halves
        (11, 0, 2**31 + 1, 16),  # 32-bit Lemire, about half rejected
        (7, -5, 2**32 - 5, 5),  # every 32-bit value: raw 32-bit draws
        (7, 0, 2**32 + 1, 5),  # 64-bit Lemire
        (7, -2**62, 2**62 + 1, 16),  # 64-bit Lemire, about half rejected
        (7, -2**63, 2**63 - 1, 3),  # the widest bounded range
    ]
    for seed, low, high, n in cases:
        values = np.random.default_rng(seed).integers(low, high, size=(n,),
                                                      dtype=np.int64)
        emit(f"    {{{u64(seed)}, {i64(low)}, {i64(high)},")
        emit("     " + listing(values, i64, per_line=3) + "},")
    emit("};")
    emit("")

    emit("/// engram.py's constants for a config (primes per column, order-major).")
    emit("struct EngramCase {")
    emit("  const char *name;")
    emit("  std::vector<int64_t> layerIds;")
    emit("  int64_t maxNgramSize, nHeads, vocabSize, compressedVocabSize;")
    emit("  std::vector<std::vector<int64_t>> multipliers, primes;")
    emit("  std::vector<int64_t> tableRows;")
    emit("};")
    emit("inline const std::vector<EngramCase> kEngramCases = {")
    for name, c, primes, mults, rows in engram_cases():
        ids = ", ".join(i64(l) for l in c["engram_layer_ids"])
        emit(f"    {{\"{name}\", {{{ids}}}, {c['engram_max_ngram_size']}, "
             f"{c['engram_n_heads']}, {c['engram_vocab_size']}, "
             f"{c['engram_compressed_vocab_size']},")
        emit("     {" + ",\n      ".join(listing(m, i64, 2, 8) for m in mults) + "},")
        emit("     {" + ",\n      ".join(listing(p, i64, 6, 8) for p in primes) + "},")
        emit("     {" + ", ".join(i64(r) for r in rows) + "}},")
    emit("};")
    emit("")
    emit("} // namespace csa::tables::expected")
    emit("")
    emit("#endif // CSA_TEST_UNIT_TABLES_EXPECTEDVALUES_H")
    return "\n".join(out) + "\n"


def main():
    text = header()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            if f.read() != text:
                sys.stderr.write(f"{sys.argv[2]} is stale: regenerate it\n")
                return 1
        print("expected values match numpy")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
