#include "dl/train/report.hpp"

#include <nlohmann/json.hpp>

namespace dl {

namespace {

// A two-column key/value table; machine formats get one object with the raw values.
struct KeyValues {
  Table table{{{"key", "", false}, {"value", "", false}}};
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  template <class T>
  void add(const std::string& key, const T& raw, const std::string& text) {
    table.add_row({Cell::str(key), Cell{CellValue(raw), text}});
    obj[key] = raw;
  }
  std::string render(OutputFormat f) const {
    if (f == OutputFormat::json) return obj.dump(2) + "\n";
    if (f == OutputFormat::jsonl) return obj.dump() + "\n";
    return table.render(f);
  }
};

void add_eval(KeyValues& kv, const EvalResult& e, const std::string& prefix) {
  kv.add(prefix + "loss", e.loss, format_fixed(e.loss, 4));
  kv.add(prefix + "accuracy", e.accuracy, format_fixed(100 * e.accuracy, 2) + "%");
  if (e.task && e.task->total) {
    double v = double(e.task->hits) / double(e.task->total);
    kv.add(prefix + e.task->name, v,
           format_fixed(100 * v, 2) + "% (" + std::to_string(e.task->hits) + "/" + std::to_string(e.task->total) + ")");
  }
}

}  // namespace

std::string format_train_summary(const TrainSummary& s, OutputFormat f) {
  KeyValues kv;
  kv.add("run_dir", s.run_dir.string(), s.run_dir.string());
  kv.add("steps", s.steps, std::to_string(s.steps));
  kv.add("params", s.params, std::to_string(s.params));
  kv.add("train_loss", s.train_loss, format_fixed(s.train_loss, 4));
  if (s.eval) add_eval(kv, *s.eval, "val_");
  kv.add("tokens_per_sec", s.tokens_per_sec, format_si(s.tokens_per_sec, "/s", 4));
  kv.add("train_seconds", s.train_seconds, format_duration(s.train_seconds));
  kv.add("checkpoint", s.checkpoint.string(), s.checkpoint.string());
  if (s.eval)
    for (size_t i = 0; i < s.eval->samples.size(); ++i)
      kv.add("sample_" + std::to_string(i + 1), s.eval->samples[i], s.eval->samples[i]);
  return kv.render(f);
}

std::string format_eval_report(const EvalReport& r, OutputFormat f) {
  KeyValues kv;
  kv.add("checkpoint", r.checkpoint.string(), r.checkpoint.string());
  kv.add("step", r.step, std::to_string(r.step));
  kv.add("data", r.data, r.data);
  kv.add("targets", r.result.targets, std::to_string(r.result.targets));
  add_eval(kv, r.result, "");
  return kv.render(f);
}

std::string format_sample_report(const SampleReport& r, OutputFormat f) {
  Table t({{"prompt", "prompt", false}, {"completion", "completion", false}, {"text", "rendered", false}});
  size_t per = r.prompts.empty() ? 0 : r.completions.size() / r.prompts.size();
  for (size_t i = 0; i < r.completions.size(); ++i)
    t.add_row({Cell::str(r.prompts[per ? i / per : 0]), Cell::str(r.completions[i]), Cell::str(r.rendered[i])});
  if (f == OutputFormat::table) {
    // People read generated text best as text, one sample per block.
    std::string out;
    for (const auto& s : r.rendered) out += s + "\n";
    return out;
  }
  return t.render(f);
}

}  // namespace dl
