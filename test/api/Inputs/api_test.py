"""The Python module csa against csa-run (test/api/python.test).

api_test.py ARTIFACT CKPT_DIR GREEDY.npy GREEDY.txt SAMPLED.txt

GREEDY.npy and GREEDY.txt are csa-run's --logits-out and "generated:" line
for --random-weights=7 --prompt=1,2,3,4,5 --max-new-tokens=8; SAMPLED.txt
its line for --prompt=3,1,4,1,5 --max-new-tokens=12 --temperature=0.8
--top-p=0.9 --seed=5. CKPT_DIR holds the same weights as seed 7. Every check
is an assert; the last line says how many passed.
"""
import sys

import os

import numpy as np

import csa

artifact, ckpt, greedy_npy, greedy_txt, sampled_txt = sys.argv[1:6]
expected = np.load(greedy_npy)
greedy_ids = [int(t) for t in open(greedy_txt).read().split()[1:]]
sampled_ids = [int(t) for t in open(sampled_txt).read().split()[1:]]
passed = 0


def ok(what):
    global passed
    passed += 1
    print("ok:", what)


print("version:", csa.version(), "api", csa.API_VERSION)
assert csa.API_VERSION == 1

model = csa.Model(artifact, random_weights=7)
assert (model.vocab_size, model.max_context, model.device) == (512, 128, "cpu")
assert model.device_note == ""
ok("Model(random_weights=7): vocab 512, max_context 128, cpu")

# Step by step: prefill, greedy, decode; every step's logits bit for bit.
seq = model.new_sequence()
logits = seq.prefill([1, 2, 3, 4, 5])
assert isinstance(logits, np.ndarray) and logits.dtype == np.float32
assert logits.shape == (512,)
tokens = []
for step in range(8):
    assert np.array_equal(logits, expected[step]), f"step {step}: logits differ"
    token = csa.greedy(logits)
    tokens.append(token)
    if step < 7:
        logits = seq.decode(token)
assert tokens == greedy_ids, (tokens, greedy_ids)
assert seq.position == 5 + 7 and seq.cache_bytes > 0
ok(f"prefill + 7 decode steps: csa-run's logits and tokens {tokens}")

# generate(): csa-run's loop, greedy and sampled.
assert model.generate([1, 2, 3, 4, 5], max_new_tokens=8) == greedy_ids
got = model.generate([3, 1, 4, 1, 5], max_new_tokens=12, temperature=0.8,
                     top_p=0.9, seed=5)
assert got == sampled_ids, (got, sampled_ids)
ok("generate: csa-run's greedy and temperature/top-p tokens")

# A Sampler by hand gives generate()'s tokens; a list of floats works too.
sampler = csa.Sampler(temperature=0.8, top_p=0.9, seed=5)
seq2 = model.new_sequence()
logits = seq2.prefill([3, 1, 4, 1, 5])
by_hand = []
for step in range(12):
    by_hand.append(sampler.sample(logits))
    if step < 11:
        logits = seq2.decode(by_hand[-1])
assert by_hand == sampled_ids
assert csa.greedy([0.0, 3.0, 3.0, 1.0]) == 1
ok("Sampler(0.8, 0.9, 5) by hand; greedy of a list")

# reset: the same prompt, the same logits.
seq.reset()
assert seq.position == 0
assert np.array_equal(seq.prefill([1, 2, 3, 4, 5]), expected[0])
ok("reset, then the same prefill")

# extend: a chunk after the prompt (no longer than the replay tail) gives
# the decode steps' logits; an extend before any prefill is an error.
stepped = model.new_sequence()
stepped.prefill([1, 2, 3, 4, 5])
for t in (6, 7, 8):
    want = stepped.decode(t)
assert np.array_equal(seq.extend([6, 7, 8]), want)
assert seq.position == 8
try:
    model.new_sequence().extend([1])
    raise AssertionError("extend before prefill ran")
except csa.Error as e:
    assert "prefill first" in str(e), e
ok("extend([6, 7, 8]) = three decode steps")

# The prefix cache: a saved sequence restored for the next turn continues as
# the kept one does.
history = [(i * 37 + 5) % 500 for i in range(80)]
kept = model.new_sequence()
kept.prefill(history[:70])
cache = csa.PrefixCache(model, directory=os.path.join(os.path.dirname(artifact), "pycache"))
cache.save(kept)
again = model.new_sequence()
assert cache.restore(again, history) == (70, "global+local")
assert np.array_equal(again.extend(history[70:]), kept.extend(history[70:]))
assert csa.PrefixCache(model, directory=os.path.join(os.path.dirname(artifact), "pycache")) \
    .restore(again, history) == (64, "global-only")
ok("PrefixCache: restore and save")

# A batch step: each row equals its sequence decoded alone.
together = [model.new_sequence() for _ in range(3)]
alone = [model.new_sequence() for _ in range(3)]
for i, (a, b) in enumerate(zip(together, alone)):
    a.prefill(history[:10 + 7 * i])
    b.prefill(history[:10 + 7 * i])
for step in range(4):
    tokens = [(step * 31 + 17 * i + 1) % 500 for i in range(3)]
    rows = csa.decode_batch(together, tokens)
    assert rows.shape == (3, expected.shape[1]), rows.shape
    for i in range(3):
        assert np.array_equal(rows[i], alone[i].decode(tokens[i])), (step, i)
ok("decode_batch rows equal single decodes")

# A greedy step: each sequence's token is greedy(its logits).
greedy = [model.new_sequence() for _ in range(3)]
with_logits = [model.new_sequence() for _ in range(3)]
for i, (g, w) in enumerate(zip(greedy, with_logits)):
    g.prefill(history[:10 + 7 * i])
    w.prefill(history[:10 + 7 * i])
for step in range(3):
    tokens = [(step * 13 + 5 * i + 2) % 500 for i in range(3)]
    picked = csa.decode_greedy(greedy, tokens)
    rows = csa.decode_batch(with_logits, tokens)
    assert picked == [csa.greedy(rows[i]) for i in range(3)], (step, picked)
ok("decode_greedy picks the logits' greedy tokens")

# A checkpoint directory with the same weights.
from_dir = csa.Model(artifact, weights=ckpt)
assert np.array_equal(from_dir.new_sequence().prefill([1, 2, 3, 4, 5]),
                      expected[0])
ok("Model(weights=CKPT_DIR) equals random_weights=7")

# Three CPU threads: the same bits (40 tokens give the linears rows to split).
long_prompt = [(i * 7) % 200 + 1 for i in range(40)]
serial = csa.Model(artifact, weights=ckpt, threads=1).new_sequence().prefill(long_prompt)
threaded = csa.Model(artifact, weights=ckpt, threads=3).new_sequence().prefill(long_prompt)
assert np.array_equal(serial, threaded)
ok("threads=3 equals threads=1")

# A sequence outlives its model.
del model, from_dir
assert np.isfinite(seq.decode(1)).all()
ok("a sequence outlives its model")


# Errors: csa.Error with the C API's status and message.
def error_of(call):
    try:
        call()
    except csa.Error as e:
        assert isinstance(e, RuntimeError)
        return e.status, str(e)
    raise AssertionError("no csa.Error")


missing = artifact + ".missing"
status, message = error_of(lambda: csa.Model(missing, random_weights=0))
assert status == "CSA_ERROR_NOT_FOUND" and missing in message, message
print("missing artifact:", status, message)
status, message = error_of(lambda: seq.prefill([1]))
assert status == "CSA_ERROR_FAILED_PRECONDITION", message
print("second prefill:", status, message)
status, message = error_of(lambda: seq.decode(512))
assert status == "CSA_ERROR_INVALID_ARGUMENT" and "512" in message, message
print("token outside the vocabulary:", status, message)
status, message = error_of(lambda: csa.Sampler(temperature=-1))
assert status == "CSA_ERROR_INVALID_ARGUMENT", message
print("negative temperature:", status, message)
status, message = error_of(lambda: csa.greedy([]))
assert status == "CSA_ERROR_INVALID_ARGUMENT", message
for bad in [dict(), dict(weights=ckpt, random_weights=1)]:
    try:
        csa.Model(artifact, **bad)
        raise AssertionError("no ValueError")
    except ValueError as e:
        assert "exactly one of" in str(e)
try:
    csa.Model(artifact, random_weights=0, device="tpu")
    raise AssertionError("no ValueError")
except ValueError as e:
    assert "'tpu'" in str(e)
ok("errors: statuses and messages")

print(f"{passed} passed, 0 failed")
