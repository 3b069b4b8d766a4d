// drafter_dflash.h: the DFlash kind's layout (drafter_dflash.c), for kinds that extend it
// (drafter_dflash2.c): its tensors come first in the flat buffer, a kind's own after them.
#pragma once

struct drafter_config;
struct drafter_param;
struct drafter;

// drafter_dflash_param_list: DFlash's 2 + 11 * n_layers + 1 tensors (drafter_kind.h param_list).
int drafter_dflash_param_list(const struct drafter_config *c, struct drafter_param *list);
// drafter_dflash_bind: the pointers of those tensors (fc, layers[l].*, norm).
void drafter_dflash_bind(struct drafter *d);
// drafter_dflash_grad_buckets: the buckets of those tensors; d->n_params must be their count.
int drafter_dflash_grad_buckets(const struct drafter *d, int *bucket_of);
