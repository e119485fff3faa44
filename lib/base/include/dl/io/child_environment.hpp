#pragma once
// The environment a child process starts with: this process's, with some variables set.

#include <boost/process/environment.hpp>

#include <string>
#include <vector>

namespace dl {

// A copy of this process's environment (writing to boost::this_process::environment() itself would
// set the variables here too) with `sets` ("NAME=value"; a missing '=' sets NAME to "") applied in
// order, a later one winning.
//
// Through basic_environment_impl::set, not operator[] or find(): in Boost 1.74 (Debian 12) find()
// compares "KEY=" with each variable by std::equal over the key's length, which libstdc++ turns into
// a memcmp reading past the end of any shorter variable, a heap over-read ASan reports. Suppressed,
// that report still made ASan start llvm-symbolizer in every process that set a child's variable,
// to match the suppression: 23% of the CPU of a 1-step 2-rank dl-train under ASan. set() compares
// lengths first.
inline boost::process::environment child_environment(const std::vector<std::string>& sets) {
  boost::process::environment env = boost::this_process::environment();
  for (const auto& kv : sets) {
    const size_t eq = kv.find('=');
    env.set(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
  }
  return env;
}

}  // namespace dl
