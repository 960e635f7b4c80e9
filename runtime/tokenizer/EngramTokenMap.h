//===- EngramTokenMap.h - The released compressed-token map ------*- C++ -*-===//
//
// Engram layers hash compressed token ids, not raw ones. The released code
// (`CompressedTokenizer`) builds the map from the tokenizer: each id decoded
// alone (raw, special tokens kept); a text holding U+FFFD is keyed by the raw
// token string, any other by engramNormalize() of it (or the text itself
// when that is empty); compressed ids are numbered in order of first
// appearance over ids 0..N-1.
//
// A model's map has config.vocab_size entries; ids from the tokenizer's size
// up to vocab_size (embedding rows no token names) take the pad's class, a
// csa rule the released code has no need for (it indexes past its table).
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_TOKENIZER_ENGRAMTOKENMAP_H
#define CSA_RUNTIME_TOKENIZER_ENGRAMTOKENMAP_H

#include "runtime/tokenizer/Tokenizer.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace csa::tokenizer {

/// The compressed id of each id 0..tokenizer.size()-1 and the class count.
struct CompressedTokens {
  std::vector<int64_t> ids;
  int64_t classes = 0;
};
CompressedTokens compressTokens(const Tokenizer &tokenizer);

/// What a model's Engram layers run with, and where it came from (printed by
/// csa-run and csa-reference).
struct EngramTokenMap {
  std::vector<int64_t> map; ///< vocab_size entries in [0, compressedVocab)
  std::string source;       ///< "tokenizer DIR/tokenizer.json", "file F", "modulo"
};

/// The model's shape the map must fit.
struct EngramVocab {
  int64_t vocabSize = 0;        ///< config vocab_size
  int64_t compressedVocab = 0;  ///< config engram_compressed_vocab_size
  int64_t padId = 0;            ///< config engram_pad_id
};

/// From a tokenizer: its class count must equal compressedVocab and its
/// size must not exceed vocabSize (errors name both numbers).
absl::StatusOr<EngramTokenMap> engramMapFromTokenizer(const Tokenizer &tokenizer,
                                                      const EngramVocab &vocab,
                                                      const std::string &source);
/// From a JSON list of vocabSize compressed ids (`--engram-token-map=FILE`).
absl::StatusOr<EngramTokenMap> engramMapFromFile(const std::string &path,
                                                 const EngramVocab &vocab);
/// The same from the file's text; errors name `source`.
absl::StatusOr<EngramTokenMap> engramMapFromText(const std::string &text,
                                                 const std::string &source,
                                                 const EngramVocab &vocab);
/// t mod compressedVocab (random-weight experiments).
EngramTokenMap moduloEngramMap(const EngramVocab &vocab);

/// A run's map, in this order: `flag` ("modulo" or a map file:
/// --engram-token-map=), else the tokenizer when there is one, else the
/// map file a random checkpoint carries (weightsDir/engram_token_map.json),
/// else an error that says what to give. Never a silent modulo map.
absl::StatusOr<EngramTokenMap> chooseEngramTokenMap(const EngramVocab &vocab,
                                                    const std::string &flag,
                                                    const Tokenizer *tokenizer,
                                                    const std::string &tokenizerPath,
                                                    const std::string &weightsDir);

} // namespace csa::tokenizer

#endif // CSA_RUNTIME_TOKENIZER_ENGRAMTOKENMAP_H
