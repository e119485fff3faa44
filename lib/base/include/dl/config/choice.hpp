// The config's choices (model.type, train.precision, parallel.schedule, ...): one enum each and one
// table of its TOML names, in the order the docs and errors list them. The table is the only place
// a choice's name is spelled: loading and --set parse with it, errors list it, config_to_toml()
// and every log line print from it. Code compares enums (cfg.train.precision == Precision::bf16).
//
// A config field holds a Choice<E>: the enum, convertible to it (switch works) and printable
// with <<. It is built from an enum only: a name is parsed once (parse_choice, choice_from_name),
// so a misspelt name in code does not compile.
//
// Besides the config's own choices, the table holds those the tools' flags and files name:
// MathPrecision (the arithmetic of a GEMM or a GPU's peak: --dtype, dlkit-bench/1 rows) and
// StateOptimizer (the optimizer state the planner counts: --optimizer).
#pragma once
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "dl/core/error.hpp"

namespace dl {

enum class ModelType { gpt, mlp, llama };
enum class RopeScaling { none, linear, llama3 };  // config.json's rope_scaling.rope_type
enum class Activation { relu, gelu };
enum class OptimizerKind { adamw, sgd };
enum class Decay { cosine, linear, constant };
enum class DeviceChoice { cpu, cuda, automatic };
// fp8: FP8 GEMMs (Transformer Engine style) around bf16 training; dl-cost and dl-shard plan it,
// dl-train does not run it (its config validation refuses it).
enum class Precision { fp32, bf16, fp16, fp8 };
enum class PipelineSchedule { gpipe, one_f_one_b };
enum class Offload { none, cpu };
enum class Progress { automatic, bar, lines, none };
enum class SourceKind { synthetic, text, tokens, csv };  // data.source = "KIND:ARG"
enum class SyntheticTask { addition };                   // data.source = "synthetic:TASK"
enum class MathPrecision { fp32, tf32, bf16, fp16, fp8 };
enum class StateOptimizer { adamw, sgd_momentum, sgd };

namespace choice_names_table {
inline constexpr std::string_view model_type[] = {"gpt", "mlp", "llama"};
inline constexpr std::string_view rope_scaling[] = {"none", "linear", "llama3"};
inline constexpr std::string_view activation[] = {"relu", "gelu"};
inline constexpr std::string_view optimizer[] = {"adamw", "sgd"};
inline constexpr std::string_view decay[] = {"cosine", "linear", "constant"};
inline constexpr std::string_view device[] = {"cpu", "cuda", "auto"};
inline constexpr std::string_view precision[] = {"fp32", "bf16", "fp16", "fp8"};
inline constexpr std::string_view pipeline_schedule[] = {"gpipe", "1f1b"};
inline constexpr std::string_view offload[] = {"none", "cpu"};
inline constexpr std::string_view progress[] = {"auto", "bar", "lines", "none"};
inline constexpr std::string_view source_kind[] = {"synthetic", "text", "tokens", "csv"};
inline constexpr std::string_view synthetic_task[] = {"addition"};
inline constexpr std::string_view math_precision[] = {"fp32", "tf32", "bf16", "fp16", "fp8"};
inline constexpr std::string_view state_optimizer[] = {"adamw", "sgd-momentum", "sgd"};
}  // namespace choice_names_table

// The names of E's values, indexed by the enum's value.
constexpr std::span<const std::string_view> choice_names(ModelType) { return choice_names_table::model_type; }
constexpr std::span<const std::string_view> choice_names(RopeScaling) { return choice_names_table::rope_scaling; }
constexpr std::span<const std::string_view> choice_names(Activation) { return choice_names_table::activation; }
constexpr std::span<const std::string_view> choice_names(OptimizerKind) { return choice_names_table::optimizer; }
constexpr std::span<const std::string_view> choice_names(Decay) { return choice_names_table::decay; }
constexpr std::span<const std::string_view> choice_names(DeviceChoice) { return choice_names_table::device; }
constexpr std::span<const std::string_view> choice_names(Precision) { return choice_names_table::precision; }
constexpr std::span<const std::string_view> choice_names(PipelineSchedule) { return choice_names_table::pipeline_schedule; }
constexpr std::span<const std::string_view> choice_names(Offload) { return choice_names_table::offload; }
constexpr std::span<const std::string_view> choice_names(Progress) { return choice_names_table::progress; }
constexpr std::span<const std::string_view> choice_names(SourceKind) { return choice_names_table::source_kind; }
constexpr std::span<const std::string_view> choice_names(SyntheticTask) { return choice_names_table::synthetic_task; }
constexpr std::span<const std::string_view> choice_names(MathPrecision) { return choice_names_table::math_precision; }
constexpr std::span<const std::string_view> choice_names(StateOptimizer) { return choice_names_table::state_optimizer; }

template <class E>
concept ConfigChoice = std::is_enum_v<E> && requires(E e) { choice_names(e); };

// "fp16" for Precision::fp16.
template <ConfigChoice E>
constexpr std::string_view choice_name(E e) {
  return choice_names(E{})[static_cast<size_t>(e)];
}

// Another name a value is also read by ("adam" for StateOptimizer::adamw): parsed, never printed.
template <class E>
struct ChoiceAlias {
  std::string_view name;
  E value;
};
inline constexpr ChoiceAlias<StateOptimizer> kStateOptimizerAliases[] = {{"adam", StateOptimizer::adamw}};
constexpr std::span<const ChoiceAlias<StateOptimizer>> choice_aliases(StateOptimizer) { return kStateOptimizerAliases; }

// The value named `name` (or aliased so); nullopt when E has no such name.
template <ConfigChoice E>
constexpr std::optional<E> parse_choice(std::string_view name) {
  const auto names = choice_names(E{});
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  if constexpr (requires { choice_aliases(E{}); })
    for (const auto& alias : choice_aliases(E{}))
      if (alias.name == name) return alias.value;
  return std::nullopt;
}

// "cpu, cuda, auto": the names joined with `sep`, for errors and docs.
template <ConfigChoice E>
std::string choice_list(std::string_view sep = ", ") {
  std::string out;
  for (std::string_view n : choice_names(E{})) out += (out.empty() ? "" : std::string(sep)) + std::string(n);
  return out;
}

// The value named `name`, else Error(usage) "unknown WHAT 'NAME' (one of a, b)".
template <ConfigChoice E>
E choice_from_name(std::string_view name, std::string_view what = "choice") {
  if (auto e = parse_choice<E>(name)) return *e;
  throw_usage("unknown ", what, " '", name, "' (one of ", choice_list<E>(), ")");
}

// A decoder over token sequences (gpt, llama), as opposed to the mlp over feature rows.
constexpr bool is_token_model(ModelType t) { return t != ModelType::mlp; }

// The arithmetic a training precision runs its GEMMs in (fp32 training: plain fp32).
constexpr MathPrecision math_precision(Precision p) {
  switch (p) {
    case Precision::bf16: return MathPrecision::bf16;
    case Precision::fp16: return MathPrecision::fp16;
    case Precision::fp8: return MathPrecision::fp8;
    case Precision::fp32: break;
  }
  return MathPrecision::fp32;
}

template <ConfigChoice E>
std::ostream& operator<<(std::ostream& os, E e) {
  return os << choice_name(e);
}

// A config field holding one of E's values.
template <ConfigChoice E>
class Choice {
 public:
  using Enum = E;
  constexpr Choice(E e = E{}) : e_(e) {}

  constexpr operator E() const { return e_; }
  constexpr E get() const { return e_; }
  constexpr std::string_view name() const { return choice_name(e_); }

  friend constexpr bool operator==(Choice a, Choice b) { return a.e_ == b.e_; }
  friend constexpr bool operator==(Choice a, E b) { return a.e_ == b; }
  friend std::ostream& operator<<(std::ostream& os, Choice c) { return os << c.name(); }
  // nlohmann::json finds this by argument-dependent lookup: a Choice is stored as its name.
  template <class Json>
  friend void to_json(Json& j, Choice c) {
    j = std::string(c.name());
  }

 private:
  E e_;
};

}  // namespace dl
