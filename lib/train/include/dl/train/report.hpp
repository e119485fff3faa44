// Results of dl-train's commands as tables or JSON for stdout.
#pragma once
#include <string>

#include "dl/cli/table.hpp"
#include "dl/train/trainer.hpp"

namespace dl {

std::string format_train_summary(const TrainSummary& s, OutputFormat f);
std::string format_eval_report(const EvalReport& r, OutputFormat f);
std::string format_sample_report(const SampleReport& r, OutputFormat f);

}  // namespace dl
