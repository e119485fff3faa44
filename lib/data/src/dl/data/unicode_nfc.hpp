// Unicode Normalization Form C (UAX #15) for the tokenizer.json NFC normalizer (Qwen2's): canonical
// decomposition, canonical ordering, canonical composition, from the tables of unicode_nfc.inc
// (the Unicode version of unicode_classes.inc) and Hangul's arithmetic.
#pragma once
#include <string>

namespace dl::data {

// `s` in NFC. Bytes that are not well-formed UTF-8 stay as they are and block composition.
void to_nfc(std::string& s);

}  // namespace dl::data
