// mode_shared_fs.h: every rank sees the job's outputs as rank 0 does (docs/distributed.md, "Several
// hosts": the shared file system).
//
// A job of several hosts writes its outputs from several ranks (the first student writes run.dir,
// every dump-features rank its shards, every regenerate rank its parts) and reads them back on
// rank 0 (features.json, the merged set): each output's directory must be one directory for every
// rank, on a file system that every host mounts. Node-local directories of the same name would
// silently split the output across the hosts' disks. The frame checks it once, before the run.
#pragma once

#include "common/comm/world.h"
#include "common/core/config.h"
#include "modes/mode.h"

// mode_shared_fs_check: collective over the job's ranks. Rank 0 writes a file holding a fresh
// nonce (.dflash-shared-fs.NONCE) into the nearest existing directory above each output of the
// mode (its parent, else the parent's, ...), every rank reads each one back, and rank 0 removes
// them. 0 when every rank read every nonce; -1 (the lowest rank that could not
// printed one line naming the output's key, the directory, its host and rank 0's) otherwise. An
// output rank 0 cannot write a file next to is left to the mode (which reports it). One rank: 0.
int mode_shared_fs_check(const world *w, const mode_def *mode, const config *cfg);
