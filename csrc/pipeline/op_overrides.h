// The overrides table (op_overrides.cpp): the ops op_policy.cpp's rules do not decide alone.
#pragma once

#include <c10/util/ArrayRef.h>

#include "pipeline/op_policy.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {

struct Override {
  const char* op;  // "aten::name" (every overload; a row naming the overload itself wins)
  int mode;        // kRules: as the rules decide; else a Mode
  unsigned flags;  // OverrideFlag
  const char* why;
  MetaRule rule = nullptr;
  ArgRule arg_rule = nullptr;
};

constexpr int kRules = -1;

// Every exception to the rules, with its reason. Add a row there, never a branch elsewhere.
c10::ArrayRef<Override> overrides();

}  // namespace torch_neuronx
