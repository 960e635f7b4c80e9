#!/usr/bin/python3
"""Golden values for test/unit/engram/EngramHashTest.cpp, computed with numpy.

Run with an interpreter that has numpy (the block below was made with numpy
1.24.2 under /usr/bin/python3):

    /usr/bin/python3 test/unit/engram/numpy_golden.py            # print the block
    /usr/bin/python3 test/unit/engram/numpy_golden.py --check F  # compare with F

It prints a C++ fragment; paste it between the GENERATED markers of
EngramHashTest.cpp. `--check EngramHashTest.cpp` exits 1 if the embedded
block differs from what this numpy produces.

What it covers:
  * numpy's random machinery on its own: SeedSequence pools and
    generate_state(4, uint64) (= the PCG64 seed words), the PCG64 state right
    after seeding, raw PCG64 outputs, and Generator.integers(..., dtype=int64)
    on the 64-bit Lemire path (with and without rejections) and the 32-bit
    path (buffered 32-bit draws);
  * the Engram hash multipliers exactly as the official engram.py draws them:
    np.random.default_rng(10007 * layer_id).integers(low=0,
    high=max(1, (int64max // compressed_vocab) // 2), size=(max_ngram,),
    dtype=np.int64), made odd as 2 * v + 1;
  * expected hash ids, computed here from the formula (not from engram.py's
    code, which needs torch/sympy/a tokenizer): the primes, offsets, pad and
    image ("dead") handling, the rolling XOR and the % prime.
"""

import sys

import numpy as np

INT64_MAX = np.iinfo(np.int64).max
DEAD = -1


def is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    d = 3
    while d * d <= n:
        if n % d == 0:
            return False
        d += 2
    return True


def layout(layer_ids, vocab, max_ngram, heads):
    """primes[layer][order-2][head]; each (order, head) restarts the search at
    vocab - 1 and takes the smallest prime above it that is not used yet."""
    seen, primes = set(), []
    for _ in layer_ids:
        per_order = []
        for _ in range(max_ngram - 1):
            row, cur = [], vocab - 1
            for _ in range(heads):
                cur += 1
                while not is_prime(cur) or cur in seen:
                    cur += 1
                seen.add(cur)
                row.append(cur)
            per_order.append(row)
        primes.append(per_order)
    return primes


def multipliers(layer_id, max_ngram, compressed_vocab):
    bound = max(1, (INT64_MAX // compressed_vocab) // 2)
    values = np.random.default_rng(10007 * layer_id).integers(
        low=0, high=bound, size=(max_ngram,), dtype=np.int64)
    return [int(v) * 2 + 1 for v in values]


def hash_ids(tokens, layer_pos, cfg, cmap):
    """Ids of every position of `tokens` (raw ids, DEAD = image position)."""
    n, heads = cfg["max_ngram"], cfg["heads"]
    primes = layout(cfg["layers"], cfg["vocab"], n, heads)[layer_pos]
    flat = [p for row in primes for p in row]
    offsets = [sum(flat[:i]) for i in range(len(flat))]
    mult = multipliers(cfg["layers"][layer_pos], n, cfg["cvocab"])
    pad = cmap(cfg["pad"])
    comp = [DEAD if t == DEAD else cmap(t) for t in tokens]
    out = []
    for p in range(len(tokens)):
        shifted, blocked = [], False
        for s in range(n):
            blocked = blocked or p - s < 0 or comp[p - s] == DEAD
            shifted.append(pad if blocked else comp[p - s])
        rolling, row = shifted[0] * mult[0], []
        for i in range(1, n):
            rolling ^= shifted[i] * mult[i]
            assert rolling <= INT64_MAX
            for h in range(heads):
                col = (i - 1) * heads + h
                row.append(rolling % flat[col] + offsets[col])
        out.append(row)
    return out


RELEASED = dict(layers=[1, 14], vocab=16000000, max_ngram=4, heads=8,
                cvocab=99092, pad=2)
TINY = dict(layers=[1], vocab=101, max_ngram=3, heads=2, cvocab=512, pad=2)


def u64(v):
    return f"0x{int(v) & 0xFFFFFFFFFFFFFFFF:016x}ull"


def i64(v):
    v = int(v)
    return "INT64_MIN" if v == -2**63 else f"{v}ll"


def ints(values, fmt=i64):
    return "{" + ", ".join(fmt(v) for v in values) + "}"


def block():
    lines = [f"// numpy {np.__version__}"]
    emit = lines.append

    # SeedSequence: entropy words, pool, generate_state(4, uint64).
    emit("const SeedSequenceGolden kSeedSequenceGolden[] = {")
    for seed in [0, 1, 12345, 10007 * 1, 10007 * 14, 2**32 + 7, 2**64 - 1]:
        ss = np.random.SeedSequence(seed)
        pool = [f"0x{int(w):08x}u" for w in ss.pool]
        state = ss.generate_state(4, np.uint64)
        emit(f"    {{{u64(seed)}, {{{', '.join(pool)}}}, {ints(state, u64)}}},")
    emit("};")

    # PCG64: state and increment after seeding, then raw outputs.
    emit("const Pcg64Golden kPcg64Golden[] = {")
    for seed in [0, 42, 10007 * 1, 10007 * 14]:
        bg = np.random.PCG64(seed)
        st = bg.state["state"]
        s, inc = st["state"], st["inc"]
        raw = bg.random_raw(6)
        emit(f"    {{{u64(seed)}, {u64(s >> 64)}, {u64(s)}, {u64(inc >> 64)}, "
             f"{u64(inc)}, {ints(raw, u64)}}},")
    emit("};")

    # Generator.integers(low, high, size=n, dtype=int64).
    emit("const IntegersGolden kIntegersGolden[] = {")
    cases = [
        (10007 * 1, 0, (INT64_MAX // 99092) // 2, 4),   # engram, released
        (10007 * 14, 0, (INT64_MAX // 99092) // 2, 4),  # engram, released
        (10007 * 1, 0, (INT64_MAX // 512) // 2, 3),     # engram, tiny
        (7, 0, 1, 3),                  # rng 0: no draws
        (7, 0, 1000, 7),               # 32-bit Lemire, buffered halves
        (7, -5, 2**32 - 6, 5),         # rng 0xFFFFFFFE: 32-bit Lemire
        (7, -5, 2**32 - 5, 5),         # rng 0xFFFFFFFF: raw 32-bit draws
        (7, 0, 2**32 + 1, 5),          # rng 2**32: 64-bit path
        (7, -2**62, 2**62 + 1, 16),    # rng_excl 2**63+1: ~half rejected
        (7, -2**63, 2**63 - 1, 3),     # widest Lemire range
        (9, 3, 2**40 + 3, 5),
    ]
    for seed, low, high, n in cases:
        vals = np.random.default_rng(seed).integers(low, high, size=(n,),
                                                    dtype=np.int64)
        emit(f"    {{{u64(seed)}, {i64(low)}, {i64(high)}, {ints(vals)}}},")
    emit("};")

    # Engram multipliers (odd), as engram.py draws them.
    for name, cfg in [("Released", RELEASED), ("Tiny", TINY)]:
        rows = [multipliers(l, cfg["max_ngram"], cfg["cvocab"])
                for l in cfg["layers"]]
        emit(f"const std::vector<std::vector<int64_t>> k{name}Multipliers = {{")
        for r in rows:
            emit(f"    {ints(r)},")
        emit("};")
        primes = layout(cfg["layers"], cfg["vocab"], cfg["max_ngram"],
                        cfg["heads"])
        emit(f"const std::vector<std::vector<int64_t>> k{name}Primes = {{")
        for layer in primes:
            emit(f"    {ints([p for row in layer for p in row])},")
        emit("};")
        emit(f"const std::vector<int64_t> k{name}TableRows = "
             f"{ints([sum(p for row in layer for p in row) for layer in primes])};")

    # Hash ids. Histories use raw ids; -1 marks an image position.
    released_tokens = [0, 1, 2, 99091, 129279, 5, 42, 42, 42, 100000, DEAD,
                       DEAD, 7, 8, 9, 2]
    identity_released = lambda t: t % RELEASED["cvocab"]
    emit(f"const std::vector<int64_t> kReleasedTokens = {ints(released_tokens)};")
    for pos, layer in enumerate(RELEASED["layers"]):
        ids = hash_ids(released_tokens, pos, RELEASED, identity_released)
        emit(f"const std::vector<std::vector<int64_t>> kReleasedIdsLayer{layer} = {{")
        for row in ids:
            emit(f"    {ints(row)},")
        emit("};")

    tiny_tokens = [3, 2, 500, 511, 0, DEAD, 17, 17, 256, 9]
    emit(f"const std::vector<int64_t> kTinyTokens = {ints(tiny_tokens)};")
    for name, cmap in [("Identity", lambda t: t),
                       ("Custom", lambda t: (7 * t + 3) % 512)]:
        ids = hash_ids(tiny_tokens, 0, TINY, cmap)
        emit(f"const std::vector<std::vector<int64_t>> kTinyIds{name} = {{")
        for row in ids:
            emit(f"    {ints(row)},")
        emit("};")
    return "\n".join(lines) + "\n"


BEGIN = "// ---- BEGIN GENERATED by test/unit/engram/numpy_golden.py ----\n"
END = "// ---- END GENERATED ----\n"


def main():
    text = block()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        source = open(sys.argv[2]).read()
        embedded = source.split(BEGIN, 1)[1].split(END, 1)[0]
        if embedded != text:
            sys.stderr.write("embedded golden block is stale: regenerate it\n")
            return 1
        print("embedded golden block matches numpy")
        return 0
    sys.stdout.write(BEGIN + text + END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
