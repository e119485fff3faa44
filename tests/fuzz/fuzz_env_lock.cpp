// dl-envlock lock files: parse_lock; an accepted lock written back by lock_to_toml reads back
// with the same content hash.
#include "dl/env/lock.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dl::fuzz::expect_parse_or_usage_error([&] {
    dl::LockRead r = dl::parse_lock(dl::fuzz::as_text(data, size), "fuzz.lock");
    dl::LockRead back = dl::parse_lock(dl::lock_to_toml(r.lock), "written.lock");
    dl::fuzz::require(back.computed_hash == r.computed_hash, "lock_to_toml(parse_lock(x)) has the same content");
  });
  return 0;
}
