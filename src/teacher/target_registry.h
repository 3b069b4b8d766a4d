// target_registry.h: the architectures the teacher serves, one table each (target_arch.h), in the
// order config.json's names are matched and listed in messages.
#pragma once
#include "teacher/target_arch.h"

extern const target_arch *const target_archs[];
extern const int target_n_archs;
