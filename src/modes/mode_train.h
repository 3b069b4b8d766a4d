// mode_train.h: what train and eval share (one job of teachers feeding students; mode_train.c).
#pragma once

#include "modes/mode.h"

void mode_train_inputs(const config *cfg, mode_paths *in);
void mode_train_outputs(const config *cfg, mode_paths *out);
int mode_train_needs(const config *cfg);
int mode_train_check_inputs(const world *w, const config *cfg);
int mode_train_plan(const config *cfg, const world_want *want, int world_size, int ranks_on_host, int print);
int mode_train_run(mode_job *j);
