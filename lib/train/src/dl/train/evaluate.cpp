// Evaluation and sampling: the loop's evaluations (forward only, through the pipeline) and the
// dl-train eval and sample commands on a finished run.
#include <algorithm>

#include "dl/core/rng.hpp"
#include "dl/data/gpt2_tokenizer.hpp"
#include "dl/parallel/pipeline.hpp"
#include "dl/train/generate.hpp"
#include "dl/train/run.hpp"

namespace dl {

using parallel::Mesh;

EvalResult evaluate(Model& model, Mesh& mesh, const Dataset& data, int64_t batch_size, int64_t max_examples) {
  const int64_t n = max_examples > 0 ? std::min(data.size(), max_examples) : data.size();
  const int64_t batches = (n + batch_size - 1) / batch_size;
  const int dp = mesh.shape().dp;
  double loss_sum = 0, targets = 0, correct = 0, hits = 0, total = 0, has_task = 0;
  std::string task_name;
  const bool counts = reports_loss(model, mesh);
  // Every dp rank runs the same number of forwards (ZeRO-3 gathers parameters collectively in
  // forward); a rank past the end repeats batch 0 and discards it.
  const int64_t rounds = (batches + dp - 1) / dp;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t b = round * dp + mesh.dp_rank();
    const bool real = b < batches;
    const int64_t first = real ? b * batch_size : 0;
    std::vector<int64_t> ids;
    for (int64_t i = first; i < std::min(n, first + batch_size); ++i) ids.push_back(i);
    Batch batch = data.make_batch(ids);
    ForwardStats st = parallel::forward_only(model, mesh.pp(), batch);
    if (!counts || !real) continue;
    loss_sum += st.loss_sum;
    targets += static_cast<double>(st.targets);
    correct += static_cast<double>(st.correct);
    if (auto s = data.score(batch, model.correct())) {
      task_name = s->name;
      has_task = 1;
      hits += static_cast<double>(s->hits);
      total += static_cast<double>(s->total);
    }
  }
  Tensor sums = Tensor::empty({6}, DType::f64);
  double* v = sums.data<double>();
  v[0] = loss_sum, v[1] = targets, v[2] = correct, v[3] = hits, v[4] = total, v[5] = has_task;
  mesh.world().allreduce(sums);
  EvalResult r;
  r.targets = static_cast<int64_t>(v[1]);
  r.loss = v[1] > 0 ? v[0] / v[1] : 0.0;
  r.accuracy = v[1] > 0 ? v[2] / v[1] : 0.0;
  if (v[5] > 0) r.task = TaskScore{task_name.empty() ? "exact_match" : task_name, static_cast<int64_t>(v[3]),
                                   static_cast<int64_t>(v[4])};
  return r;
}

std::vector<std::string> demo_samples(Model& model, const Dataset& val, const Tokenizer* tok, int64_t count,
                                      RandomStream& rng) {
  std::vector<std::string> out;
  if (model.context_length() == 0 || !tok || count <= 0) return out;
  auto prompts = val.prompts(count);
  GenerateOptions go;
  go.vocab = tok->vocab_size();
  if (!prompts.empty()) {
    for (const auto& p : prompts) {
      go.max_tokens = static_cast<int64_t>(p.expected.size()) + 2;
      go.stop = val.stop_text();
      auto ids = generate(model, tok->encode(p.prompt), go, rng);
      out.push_back(val.render(p.prompt, utf8_for_display(tok->decode(ids))));
    }
    return out;
  }
  if (tok->kind() == TokenizerKind::ids) return out;  // ids as text say nothing
  Batch b = val.make_batch({0});
  int64_t plen = std::min<int64_t>(24, b.inputs.numel());
  std::vector<int32_t> prompt(b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + plen);
  go.max_tokens = 80;
  go.temperature = 0.8;
  auto ids = generate(model, prompt, go, rng);
  std::string text = utf8_for_display(tok->decode(prompt) + tok->decode(ids));
  for (char& ch : text)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  out.push_back(text);
  return out;
}


EvalReport run_eval(const EvalOptions& o) {
  LoadedRun r = load_run(o.run_dir, o.overrides);
  EvalReport rep;
  rep.checkpoint = r.checkpoint;
  rep.step = r.state.step;
  const Dataset* target = r.data.val.get();
  DataSplits other;
  if (!o.data.empty()) {
    DataConfig dc = r.config.data;
    dc.source = o.data;
    dc.val_source.clear();
    dc.val_fraction = 0.0;
    other = open_datasets(dc, r.config.model.block_size, static_cast<uint64_t>(r.config.train.seed));
    target = other.train.get();
    if (target->is_sequence()) check_model_vocab(*target, r.config.model.vocab_size);
    rep.data = o.data;
  } else {
    if (!target) throw_usage("the run's data has no validation split (data.val_fraction = 0); pass --data SPEC");
    rep.data = r.config.data.val_source.empty() ? r.config.data.source + " (validation split)" : r.config.data.val_source;
  }
  rep.result = evaluate(*r.model, *r.mesh, *target, r.config.train.batch_size, o.max_batches * r.config.train.batch_size);
  return rep;
}

SampleReport run_sample(const SampleOptions& o) {
  LoadedRun r = load_run(o.run_dir, {});
  if (r.model->context_length() == 0) throw_usage("dl-train sample needs a gpt run; ", o.run_dir.string(), " trained a ", r.model->kind(), " model");
  const Tokenizer& tok = *r.data.tokenizer;
  SampleReport rep;
  rep.checkpoint = r.checkpoint;
  rep.step = r.state.step;
  const Dataset* val = r.data.val ? r.data.val.get() : r.data.train.get();
  if (!o.prompt.empty()) {
    rep.prompts.push_back(o.prompt);
  } else {
    for (const auto& p : val->prompts(o.data_prompts)) rep.prompts.push_back(p.prompt);
    if (rep.prompts.empty()) rep.prompts.push_back(tok.kind() == TokenizerKind::ids ? "0" : "\n");
  }
  RandomStream rng(stream_key(o.seed ? o.seed : static_cast<uint64_t>(r.config.train.seed), "sample"));
  GenerateOptions go;
  go.max_tokens = o.tokens;
  go.temperature = o.temperature;
  go.top_k = o.top_k;
  go.stop = val->stop_text();
  go.vocab = tok.vocab_size();
  for (const auto& p : rep.prompts) {
    std::vector<int32_t> ids = tok.encode(p);
    for (int64_t c = 0; c < std::max<int64_t>(1, o.count); ++c) {
      // Shown text: a completion can end inside a character (GPT-2's byte tokens); as GPT-2 does.
      std::string completion = utf8_for_display(tok.decode(generate(*r.model, ids, go, rng)));
      rep.completions.push_back(completion);
      rep.rendered.push_back(val->render(p, completion));
    }
  }
  return rep;
}

}  // namespace dl
