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
    // Decimal only (issue 49): strtod would take hexadecimal integers and floats, inf and nan.
    CHECK_ERR(config_set(&c, "train.steps=0x10"), "key 'train.steps' wants an integer, got \"0x10\"");
    CHECK_ERR(config_set(&c, "run.seed=0X1p4"), "key 'run.seed' wants an integer");
    CHECK_ERR(config_set(&c, "loss.alpha=0x1p-3"), "key 'loss.alpha' wants a number, got \"0x1p-3\"");
    CHECK_ERR(config_set(&c, "loss.selector_weight=0x10"), "key 'loss.selector_weight' wants a number");
    CHECK_ERR(config_set(&c, "train.lr=nan"), "key 'train.lr' wants a number");
    CHECK_ERR(config_set(&c, "train.lr= 0.1"), "key 'train.lr' wants a number");
    CHECK_ERR(config_set(&c, "target.layer_ids=1,0x2"), "key 'target.layer_ids' wants integers");
    CHECK_ERR(config_set(&c, "data.sets=a.h5:0x2"), "key 'data.sets': the weight in \"a.h5:0x2\" is not a number");
    CHECK_ERR(config_load_json(&c, "{\"train\": {\"steps\": 0x10}}", "t.json"), "t.json: not valid JSON");
    CHECK(config_set(&c, "loss.alpha=1.5e-1") == 0 && c.loss_alpha == 0.15);
    CHECK(config_set(&c, "train.steps=+1e2") == 0 && c.steps == 100);
    CHECK(config_set(&c, "train.lr=.5") == 0 && c.lr == 0.5);
    CHECK(c.seed == 99); // a failed override leaves the old value

    // Nothing silent: a key twice, a NUL, a value out of its range, each one line naming the key.
    CHECK_ERR(config_load_json(&c, "{\"train\": {\"lr\": 0.003, \"lr\": 5}}", "t.json"), "t.json: key 'train.lr' is given twice");
    CHECK_ERR(config_load_json(&c, "{\"train\": {}, \"run\": {}, \"train\": {\"lr\": 5}}", "t.json"), "key 'train' is given twice");
    CHECK(c.lr != 5);
    CHECK_ERR(config_load_json(&c, "{\"data\": {\"sets\": [{\"path\": \"a.h5\", \"path\": \"b.h5\"}]}}", "t.json"),
              "key 'data.sets': set 0 gives \"path\" twice");
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"dir\": \"a\\u0000b\"}}", "t.json"), "t.json: key 'run.dir' holds a NUL character");
    CHECK_ERR(config_load_json(&c, "{\"run\": {\"seed\": 3}, \"data\": {\"sets\": [\"x.h5\", {\"path\": \"y\\u0000\"}]}}", "t.json"),
              "key 'data.sets.path' holds a NUL");
    CHECK_ERR(config_load_json(&c, "{\"ru\\u0000n\": {}}", "t.json"), "key 'ru\\u0000n' holds a NUL");
    CHECK(config_load_json(&c, "{\"run\": {\"dir\": \"a\\\\u0000b\"}}", "t.json") == 0); // an escaped backslash, then text
    CHECK(strcmp(c.run_dir, "a\\u0000b") == 0);
    CHECK(test_write_file(test_path("nul.json"), "{\"run\": {\"seed\": 5}}\0{\"x\": 1}", 29) == 0);
    CHECK_ERR(config_load_file(&c, test_path("nul.json")), "nul.json: a NUL byte at offset 20");
    CHECK_ERR(config_set(&c, "data.bucket_size=0"), "key 'data.bucket_size' = 0 is outside [1, 1e+12]");
    CHECK_ERR(config_set(&c, "train.steps=1e12"), "key 'train.steps' = 1e+12 is outside [1, 1000000000]");
    CHECK_ERR(config_load_json(&c, "{\"train\": {\"steps\": 1e12}}", "t.json"), "t.json: key 'train.steps' = 1e+12 is outside");
    CHECK_ERR(config_load_json(&c, "{\"train\": {\"steps\": 1e300}}", "t.json"), "'train.steps' = 1e+300 is outside");
    CHECK_ERR(config_set(&c, "checkpoint.every=2000000000"), "'checkpoint.every' = 2000000000 is outside [0, 1000000000]");
    CHECK_ERR(config_set(&c, "train.mem_budget=2000000T"), "'train.mem_budget' = 2.199023256e+18 is outside [0, 1e+18]");
    CHECK_ERR(config_load_json(&c, "{\"teacher\": {\"mem_budget\": 1e300}}", "t.json"), "'teacher.mem_budget' = 1e+300 is outside");
    CHECK_ERR(config_set(&c, "train.steps=1.5e0"), "'train.steps' wants an integer");
    CHECK(config_set(&c, "train.steps=1e6") == 0 && c.steps == 1000000);
    CHECK(config_set(&c, "run.seed=010") == 0 && c.seed == 10); // decimal, not octal
    char long_list[700];
    memset(long_list, '1', sizeof long_list - 1);
    long_list[sizeof long_list - 1] = '\0';
    memcpy(long_list, "target.layer_ids=", 17);
    CHECK_ERR(config_set(&c, long_list), "'target.layer_ids' is longer than 511 characters");
    // A key or value with a newline still makes one line.
    CHECK_ERR(config_load_json(&c, "{\"ru\\nn\": {\"seed\": 1}}", "t.json"), "unknown key 'ru\\nn.seed'");
    CHECK(!strchr(error_msg(), '\n'));
    CHECK_ERR(config_set(&c, "run.device=cp\nu"), "\"cp\\nu\" is not one of");
    CHECK(!strchr(error_msg(), '\n'));

    // Across keys (config_check).
    config x;
    config_defaults(&x);
    CHECK(config_check(&x) == 0);
    CHECK(config_set(&x, "train.ema=1") == 0);
    CHECK_ERR(config_check(&x), "train.ema = 1 never moves");
    CHECK(config_set(&x, "train.ema=0.999") == 0 && config_check(&x) == 0);
    // What a mode asks of the keys is its prepare hook's (src/modes: a training job's run.dir and
    // batch size; test_modes.sh, test_config_errors.sh): config_check names no mode.
    CHECK(config_set(&x, "data.max_tokens_per_batch=10000") == 0 && config_set(&x, "run.dir=") == 0 && config_check(&x) == 0);

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
