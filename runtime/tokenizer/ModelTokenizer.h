//===- ModelTokenizer.h - A checkpoint folder's tokenizer files -*- C++ -*-===//
//
// What a checkpoint folder says about text: `tokenizer.json`, and BOS / EOS
// from `tokenizer_config.json` (bos_token, eos_token, add_bos_token,
// add_eos_token) and `generation_config.json` (bos_token_id, eos_token_id,
// an id or a list). The ids put around a prompt: add_bos_token /
// add_eos_token when tokenizer_config.json says (as LlamaTokenizerFast
// does), otherwise tokenizer.json's post-processor template. Generation
// stops at any EOS id: generation_config's when it names them, else
// tokenizer_config's eos_token.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_TOKENIZER_MODELTOKENIZER_H
#define CSA_RUNTIME_TOKENIZER_MODELTOKENIZER_H

#include "runtime/tokenizer/Tokenizer.h"

#include "absl/status/statusor.h"

#include <optional>
#include <string>
#include <vector>

namespace csa::tokenizer {

struct ModelTokenizer {
  Tokenizer tokenizer;
  std::string path;                    ///< the tokenizer.json read
  std::vector<int64_t> prefix, suffix; ///< put around an encoded prompt
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;

  /// `location` is a folder (its tokenizer.json and, beside it, the two
  /// config files when present) or a tokenizer.json file.
  static absl::StatusOr<ModelTokenizer> load(const std::string &location);

  /// The prompt's ids: prefix, the text's (ill-formed UTF-8 is an error
  /// naming the byte; repairUtf8 first to accept it), suffix.
  absl::StatusOr<std::vector<int64_t>> encodePrompt(std::string_view text) const;
  bool isEos(int64_t id) const;
};

/// True if `dir` holds a tokenizer.json.
bool hasTokenizer(const std::string &dir);

} // namespace csa::tokenizer

#endif // CSA_RUNTIME_TOKENIZER_MODELTOKENIZER_H
