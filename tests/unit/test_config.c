// test_config.c: defaults, JSON loading, overrides, and every kind of bad input naming the key.
#include <stdlib.h>
#include <string.h>

#include "common/core/config.h"
#include "testing.h"

int main(void) {
    config c;
    config_defaults(&c);
    CHECK(strcmp(c.device, "auto") == 0);
    CHECK(c.students == 1 && c.teachers == -1);
    CHECK(c.block_size == 16);
    CHECK(c.target_layer_ids.n == 0);

    // Nested JSON sets dotted keys; keys not mentioned keep their defaults.
    CHECK(config_load_json(&c, "{\"run\": {\"seed\": 7, \"device\": \"cpu\"},"
                               " \"target\": {\"layer_ids\": [1, 9, 17]}, \"drafter\": {\"block_size\": 32}}",
                           "t.json") == 0);
    CHECK(c.seed == 7 && strcmp(c.device, "cpu") == 0 && c.block_size == 32);
    CHECK(c.target_layer_ids.n == 3 && c.target_layer_ids.v[0] == 1 && c.target_layer_ids.v[2] == 17);
    CHECK(c.students == 1);

    // Command-line overrides, applied after the file.
    CHECK(config_set(&c, "run.seed=99") == 0 && c.seed == 99);
    CHECK(config_set(&c, "target.layer_ids=2,4") == 0 && c.target_layer_ids.n == 2 && c.target_layer_ids.v[1] == 4);
    CHECK(config_set(&c, "target.layer_ids=") == 0 && c.target_layer_ids.n == 0);
    CHECK(config_set(&c, "data.path=/x/y.h5") == 0 && strcmp(c.data_path, "/x/y.h5") == 0);

    // Bad input: each error names the key (or the file) and what is wrong.
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"sed\": 7}}", "t.json"), "unknown key 'run.sed'");
    CHECK_ERR(config_load_json(&c, "{\"seed\": 7}", "t.json"), "did you mean 'run.seed'");
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"seed\": \"7\"}}", "t.json"), "'run.seed' wants an integer");
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"seed\": 7.5}}", "t.json"), "'run.seed' wants an integer");
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"device\": \"tpu\"}}", "t.json"), "not one of auto|cpu|cuda");
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"device\": 3}}", "t.json"), "'run.device' wants a string");
    CHECK_ERR(config_load_json(&c, "{\"target\": {\"layer_ids\": [1, \"a\"]}}", "t.json"), "list of integers");
    CHECK_ERR(config_load_json(&c, "{\"drafter\": {\"block_size\": 1}}", "t.json"), "outside [2, 1024]");
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"seed\": 1,}", "t.json"), "t.json: not valid JSON");
    CHECK_ERR(config_load_json(&c, "[1, 2]", "t.json"), "must be a JSON object");
    CHECK_ERR(config_set(&c, "run.seed"), "expected --key=value");
    CHECK_ERR(config_set(&c, "run.seed=abc"), "wants an integer, got \"abc\"");
    CHECK_ERR(config_set(&c, "run.seed=12abc"), "wants an integer");
    CHECK_ERR(config_set(&c, "nope.key=1"), "unknown key 'nope.key'");
    CHECK_ERR(config_set(&c, "world.students=0"), "outside");
    CHECK_ERR(config_load_file(&c, test_path("missing.json")), "missing.json");
    CHECK(c.seed == 99); // a failed override leaves the old value

    // The effective config round-trips through its own JSON, and the hash follows the content.
    char *json = config_to_json(&c);
    config d;
    config_defaults(&d);
    CHECK(config_load_json(&d, json, "roundtrip") == 0);
    char *json2 = config_to_json(&d);
    CHECK(strcmp(json, json2) == 0);
    free(json2);
    CHECK(config_hash(&c) == config_hash(&d));
    CHECK(config_set(&d, "run.seed=100") == 0 && config_hash(&c) != config_hash(&d));
    free(json);
    return test_finish("test_config");
}
