// testing_quant.h: helpers of the quantised-checkpoint tests (test_target_quant.c, test_ops_quant.c,
// test_ops_quant_cuda.c): a directory holding a committed fixture as its model.safetensors, and
// target_quant_parse of a config.json given as a string.
#pragma once
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/data/safetensors.h"
#include "teacher/target_quant.h"
#include "testing.h"

// A directory whose model.safetensors is the committed fixture (a link).
static inline int open_fixture_dir(st_dir *d, const char *fixture, const char *tag) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", test_path(tag));
    mkdir(dir, 0755);
    char link[600];
    snprintf(link, sizeof link, "%s/model.safetensors", dir);
    unlink(link);
    if (symlink(test_src_path(fixture), link) != 0) return -1;
    return safetensors_dir_open(d, dir);
}

// target_quant_parse of the config.json text json (a test failure if it is not JSON)
static inline int parse_qc(target_quant *q, const char *json) {
    cJSON *root = cJSON_Parse(json);
    if (!root) {
        test_fail(__FILE__, __LINE__, "bad test JSON %s", json);
        return -1;
    }
    int rc = target_quant_parse(q, root, "config.json");
    cJSON_Delete(root);
    return rc;
}
