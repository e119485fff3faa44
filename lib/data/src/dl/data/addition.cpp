// synthetic:addition — a task a tiny GPT learns in about a minute on a laptop CPU.
//
// A problem reads "a+b=c;" with a and b zero-padded to `digits` digits and the sum c written with
// digits + 1 digits in reversed order (least significant first), so that each answer digit depends
// only on operand digits and the carry already written: 42+317=359 with digits = 3 is
// "042+317=9530;". An example is a window of block_size + 1 byte tokens holding as many whole
// problems as fit, padded with '\n'. Only the answer characters (the digits of c and the ';') are
// targets; every other target is -1, so the loss measures exactly the skill being taught.
//
// Every example is a pure function of (seed, split, example index): problem j of example i takes
// its operands from Philox block (stream key, counter i, lane j). Train and validation use
// different streams ("data/addition/train", "data/addition/val"); validation is a fixed set of
// kValExamples examples, training is effectively endless (2^40 examples). With few digits the two
// can share problems (there are only 10^(2*digits) of them); with digits >= 3 overlap is rare.
#include <algorithm>

#include "dl/core/rng.hpp"
#include "dl/data/sources.hpp"

namespace dl::data {

namespace {

constexpr int64_t kTrainExamples = int64_t(1) << 40;
constexpr int64_t kValExamples = 256;
constexpr int32_t kPad = '\n';

int64_t pow10(int d) {
  int64_t p = 1;
  for (int i = 0; i < d; ++i) p *= 10;
  return p;
}

// Writes `v` as exactly `width` decimal digits, most significant first.
void put_digits(std::string& out, int64_t v, int width) {
  std::string s(static_cast<size_t>(width), '0');
  for (int i = width - 1; i >= 0; --i, v /= 10) s[static_cast<size_t>(i)] = static_cast<char>('0' + v % 10);
  out += s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

class AdditionDataset final : public SequenceDataset {
 public:
  AdditionDataset(int digits, int64_t block_size, uint64_t seed, bool val)
      : digits_(digits),
        T_(block_size),
        val_(val),
        key_(stream_key(seed, val ? "data/addition/val" : "data/addition/train")),
        val_key_(stream_key(seed, "data/addition/val")),
        plen_(addition_problem_len(digits)),
        per_example_((block_size + 1) / plen_),
        range_(static_cast<uint64_t>(pow10(digits))) {
    vocab_ = 256;
  }

  std::string describe() const override {
    return str("synthetic:addition (digits=", digits_, ") ", val_ ? "val" : "train", ": ", size(),
               " examples of ", T_, " tokens, ", per_example_, " problems each");
  }
  int64_t size() const override { return val_ ? kValExamples : kTrainExamples; }

  Batch make_batch(const std::vector<int64_t>& ids) const override {
    check_example_ids(ids, size(), "synthetic:addition");
    const int64_t n = static_cast<int64_t>(ids.size());
    Batch b{Tensor::empty({n, T_}, DType::i32), Tensor::empty({n, T_}, DType::i32)};
    std::vector<int32_t> tok(static_cast<size_t>(T_ + 1));
    std::vector<char> answer(static_cast<size_t>(T_ + 1));
    for (int64_t r = 0; r < n; ++r) {
      fill(key_, ids[static_cast<size_t>(r)], tok.data(), answer.data());
      int32_t* in = b.inputs.data<int32_t>() + r * T_;
      int32_t* tg = b.targets.data<int32_t>() + r * T_;
      for (int64_t t = 0; t < T_; ++t) {
        in[t] = tok[static_cast<size_t>(t)];
        tg[t] = answer[static_cast<size_t>(t + 1)] ? tok[static_cast<size_t>(t + 1)] : -1;
      }
    }
    return b;
  }

  // A problem is the run of non-negative targets that ends with ';'; it is a hit when every
  // target of the run was predicted correctly.
  std::optional<TaskScore> score(const Batch& batch, const Tensor& correct) const override {
    const Tensor& tg = batch.targets;
    if (correct.numel() != tg.numel())
      throw_runtime("synthetic:addition score: ", correct.describe(), " correctness flags for targets ",
                    tg.describe());
    const int64_t row = tg.ndim() >= 2 ? tg.size(-1) : tg.numel();
    const int32_t* t = tg.data<int32_t>();
    const int32_t* c = correct.data<int32_t>();
    TaskScore s{"exact_match", 0, 0};
    bool in_problem = false, ok = true;
    for (int64_t i = 0; i < tg.numel(); ++i) {
      if (i % row == 0) in_problem = false;  // problems never cross rows
      if (t[i] < 0) {
        in_problem = false;
        continue;
      }
      if (!in_problem) {
        in_problem = true;
        ok = true;
      }
      ok = ok && c[i] != 0;
      if (t[i] == ';') {
        ++s.total;
        s.hits += ok;
        in_problem = false;
      }
    }
    return s;
  }

  std::vector<PromptExample> prompts(int64_t n) const override {
    std::vector<PromptExample> out;
    const int64_t cap = kValExamples * per_example_;
    for (int64_t k = 0; k < std::min(n, cap); ++k) {
      int64_t a, b;
      operands(val_key_, k / per_example_, static_cast<uint32_t>(k % per_example_), a, b);
      std::string p = addition_problem(a, b, digits_);
      size_t eq = p.find('=');
      out.push_back({p.substr(0, eq + 1), p.substr(eq + 1)});
    }
    return out;
  }

  std::string render(const std::string& prompt, const std::string& completion) const override {
    // The prompt must read "A+B=" with `digits` digits each; anything else is shown as is.
    const size_t D = static_cast<size_t>(digits_);
    if (prompt.size() != 2 * D + 2 || prompt[D] != '+' || prompt.back() != '=' ||
        !all_digits(std::string_view(prompt).substr(0, D)) || !all_digits(std::string_view(prompt).substr(D + 1, D)))
      return prompt + completion;
    const int64_t a = std::stoll(prompt.substr(0, D)), b = std::stoll(prompt.substr(D + 1, D));
    const std::string sum = std::to_string(a + b);
    std::string want;
    put_digits(want, a + b, digits_ + 1);
    std::reverse(want.begin(), want.end());

    const std::string answer = completion.substr(0, completion.find(';'));
    std::string shown;
    if (all_digits(answer)) {
      shown.assign(answer.rbegin(), answer.rend());
      size_t nz = shown.find_first_not_of('0');
      shown = nz == std::string::npos ? "0" : shown.substr(nz);
    } else {
      shown = "\"";
      for (char ch : answer) shown.push_back(ch >= 32 && ch < 127 ? ch : '?');
      shown += "\"";
    }
    return prompt + shown + (answer == want ? " ok" : " wrong (" + sum + ")");
  }

  std::string stop_text() const override { return ";"; }

 private:
  void operands(uint64_t key, int64_t example, uint32_t slot, int64_t& a, int64_t& b) const {
    PhiloxCounter r = random_block(key, static_cast<uint64_t>(example), slot);
    uint64_t x = static_cast<uint64_t>(r[1]) << 32 | r[0], y = static_cast<uint64_t>(r[3]) << 32 | r[2];
    a = static_cast<int64_t>((static_cast<unsigned __int128>(x) * range_) >> 64);
    b = static_cast<int64_t>((static_cast<unsigned __int128>(y) * range_) >> 64);
  }

  // The T + 1 tokens of one example and which of them are answer characters.
  void fill(uint64_t key, int64_t example, int32_t* tok, char* answer) const {
    int64_t pos = 0;
    const int64_t answer_begin = 2 * digits_ + 2;
    for (int64_t j = 0; j < per_example_; ++j) {
      int64_t a, b;
      operands(key, example, static_cast<uint32_t>(j), a, b);
      std::string p = addition_problem(a, b, digits_);
      for (int64_t k = 0; k < plen_; ++k, ++pos) {
        tok[pos] = static_cast<unsigned char>(p[static_cast<size_t>(k)]);
        answer[pos] = k >= answer_begin;
      }
    }
    for (; pos <= T_; ++pos) {
      tok[pos] = kPad;
      answer[pos] = 0;
    }
  }

  int digits_;
  int64_t T_;
  bool val_;
  uint64_t key_, val_key_;
  int64_t plen_, per_example_;
  uint64_t range_;
};

}  // namespace

int64_t addition_problem_len(int digits) { return 3 * static_cast<int64_t>(digits) + 4; }

std::string addition_problem(int64_t a, int64_t b, int digits) {
  std::string s;
  put_digits(s, a, digits);
  s.push_back('+');
  put_digits(s, b, digits);
  s.push_back('=');
  std::string c;
  put_digits(c, a + b, digits + 1);
  s.append(c.rbegin(), c.rend());
  s.push_back(';');
  return s;
}

DataSplits open_addition(const DataConfig& data, int64_t block_size, uint64_t seed, Role role) {
  if (data.digits < 1 || data.digits > 9)
    throw_usage("data.digits = ", data.digits, " must be between 1 and 9 for synthetic:addition");
  const int D = static_cast<int>(data.digits);
  const int64_t plen = addition_problem_len(D);
  if (block_size + 1 < plen)
    throw_usage("model.block_size = ", block_size, " is too short for synthetic:addition with data.digits = ", D,
                ": one problem (\"", addition_problem(pow10(D) - 1, 1, D), "\") takes ", plen,
                " tokens, so model.block_size must be at least ", plen - 1);
  DataSplits out;
  if (role != Role::val) out.train = std::make_unique<AdditionDataset>(D, block_size, seed, false);
  if (role != Role::train) out.val = std::make_unique<AdditionDataset>(D, block_size, seed, true);
  out.tokenizer = make_byte_tokenizer();
  return out;
}

}  // namespace dl::data
