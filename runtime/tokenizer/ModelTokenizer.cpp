//===- ModelTokenizer.cpp - A checkpoint folder's tokenizer files ---------===//

#include "runtime/tokenizer/ModelTokenizer.h"

#include "runtime/support/JsonLimits.h"

#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace csa::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// The parsed file, or null when it does not exist.
absl::StatusOr<std::optional<json>> readOptionalJson(const fs::path &path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return std::optional<json>();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    json value = json::parse(text.str());
    if (support::jsonDepth(value) > support::kMaxJsonDepth || !value.is_object())
      return absl::InvalidArgumentError(absl::StrCat(path.string(), ": must be a JSON object"));
    return std::optional<json>(std::move(value));
  } catch (const json::exception &e) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not valid JSON: ", e.what()));
  }
}

/// tokenizer_config.json's token fields are a string or {"content": ...}.
absl::StatusOr<std::optional<int64_t>> namedToken(const json &config, const char *key,
                                                  const Tokenizer &tokenizer,
                                                  const std::string &file) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null())
    return std::optional<int64_t>();
  std::string name;
  if (it->is_string())
    name = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    name = (*it)["content"].get<std::string>();
  else
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", key, ": must be a token string"));
  auto id = tokenizer.tokenId(name);
  if (!id)
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": ", key, ": '", name, "' is not a token of the tokenizer"));
  return std::optional<int64_t>(*id);
}

absl::StatusOr<std::vector<int64_t>> idList(const json &value, const char *key,
                                            const Tokenizer &tokenizer,
                                            const std::string &file) {
  std::vector<json> items;
  if (value.is_array())
    items.assign(value.begin(), value.end());
  else
    items.push_back(value);
  std::vector<int64_t> ids;
  for (const json &v : items) {
    if (!(v.is_number_integer() || v.is_number_unsigned()) || v.get<int64_t>() < 0 ||
        v.get<int64_t>() >= tokenizer.size())
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": ", key, ": ", v.dump(), " is not a token id in [0, ", tokenizer.size(), ")"));
    ids.push_back(v.get<int64_t>());
  }
  return ids;
}

} // namespace

bool hasTokenizer(const std::string &dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec);
}

absl::StatusOr<ModelTokenizer> ModelTokenizer::load(const std::string &location) {
  std::error_code ec;
  fs::path file = location, dir = fs::path(location).parent_path();
  if (fs::is_directory(location, ec))
    file = fs::path(location) / "tokenizer.json", dir = location;
  auto tokenizer = Tokenizer::fromFile(file.string());
  if (!tokenizer.ok())
    return tokenizer.status();
  ModelTokenizer out{std::move(*tokenizer), file.string(), {}, {}, std::nullopt, {}};
  out.prefix = out.tokenizer.templatePrefix();
  out.suffix = out.tokenizer.templateSuffix();

  const fs::path configPath = dir / "tokenizer_config.json";
  auto config = readOptionalJson(configPath);
  if (!config.ok())
    return config.status();
  std::optional<int64_t> configEos;
  if (*config) {
    const json &c = **config;
    const std::string name = configPath.string();
    auto bos = namedToken(c, "bos_token", out.tokenizer, name);
    if (!bos.ok())
      return bos.status();
    auto eos = namedToken(c, "eos_token", out.tokenizer, name);
    if (!eos.ok())
      return eos.status();
    out.bos = *bos;
    configEos = *eos;
    for (const char *key : {"add_bos_token", "add_eos_token"}) {
      auto it = c.find(key);
      if (it == c.end() || it->is_null())
        continue;
      if (!it->is_boolean())
        return absl::InvalidArgumentError(absl::StrCat(name, ": ", key, ": must be true or false"));
      const bool bosKey = std::string(key) == "add_bos_token";
      const std::optional<int64_t> &token = bosKey ? out.bos : configEos;
      if (it->get<bool>() && !token)
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": ", key, " is true but ", bosKey ? "bos_token" : "eos_token", " is not set"));
      std::vector<int64_t> &ids = bosKey ? out.prefix : out.suffix;
      ids.clear();
      if (it->get<bool>())
        ids.push_back(*token);
    }
  }

  const fs::path generationPath = dir / "generation_config.json";
  auto generation = readOptionalJson(generationPath);
  if (!generation.ok())
    return generation.status();
  if (*generation) {
    const json &g = **generation;
    const std::string name = generationPath.string();
    if (auto it = g.find("bos_token_id"); it != g.end() && !it->is_null()) {
      auto ids = idList(*it, "bos_token_id", out.tokenizer, name);
      if (!ids.ok())
        return ids.status();
      if (!ids->empty())
        out.bos = ids->front();
    }
    if (auto it = g.find("eos_token_id"); it != g.end() && !it->is_null()) {
      auto ids = idList(*it, "eos_token_id", out.tokenizer, name);
      if (!ids.ok())
        return ids.status();
      out.eos = *ids;
    }
  }
  if (out.eos.empty() && configEos)
    out.eos.push_back(*configEos);
  return out;
}

absl::StatusOr<std::vector<int64_t>>
ModelTokenizer::encodePrompt(std::string_view text) const {
  auto ids = tokenizer.encode(text, /*addSpecialTokens=*/false);
  if (!ids.ok())
    return ids.status();
  std::vector<int64_t> out = prefix;
  out.insert(out.end(), ids->begin(), ids->end());
  out.insert(out.end(), suffix.begin(), suffix.end());
  return out;
}

bool ModelTokenizer::isEos(int64_t id) const {
  return std::find(eos.begin(), eos.end(), id) != eos.end();
}

} // namespace csa::tokenizer
