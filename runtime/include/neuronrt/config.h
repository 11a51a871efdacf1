// Every environment setting of the project, in one table, parsed strictly in one place.
//
// A setting is read when the layer that needs it first starts (the runtime, the op pipeline), so
// a process sees one value for its whole life. A malformed value is an error that names the
// variable and what it accepts; nothing is guessed ("256MB" is not 256 bytes, " 100" is not 100).
// The table is what the README's settings section and `torch_neuronx.config` show.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace neuronrt::config {

struct Setting {
  const char* name;
  const char* default_value;  // as a user would write it; "" when unset means "off" or "none"
  const char* meaning;
};

// Every setting the project reads, in the order the README lists them.
const std::vector<Setting>& all();

// The value of a listed setting, or nullopt when it is unset or empty. Reading a name that is
// not in the table is a programming error (std::logic_error).
std::optional<std::string> raw(const char* name);

// Each parser throws std::invalid_argument with a message naming the variable.
bool flag(const char* name);  // unset, "0", "false", "off" -> false; "1", "true", "on" -> true
int64_t integer(const char* name, int64_t fallback, int64_t min, int64_t max);
// A byte count: digits, optionally followed by KiB, MiB, GiB or TiB; from 1 to `max`.
uint64_t bytes(const char* name, uint64_t fallback, uint64_t max = UINT64_MAX);
std::string choice(const char* name, const char* fallback, std::initializer_list<const char*> allowed);
std::string text(const char* name, const char* fallback = "");
// A comma-separated list, each item one of `allowed` (unset: empty).
std::vector<std::string> items(const char* name, std::initializer_list<const char*> allowed);

// Parsers over a given text, for tests and for values that do not come from the environment.
uint64_t parse_bytes(const std::string& text, const char* what, uint64_t max = UINT64_MAX);
int64_t parse_integer(const std::string& text, const char* what, int64_t min, int64_t max);

}  // namespace neuronrt::config
