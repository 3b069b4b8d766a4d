// test_identity.c: CRC32C (the standard check value, streaming, the JSON seal: every flipped bit
// of a sealed text is seen) and identity_check (each field compared only when both sides know it;
// a mismatch names both values), issue 27 items 1 and 4.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/core/crc32c.h"
#include "common/data/identity.h"
#include "testing.h"

static void test_crc(void) {
    CHECK(crc32c_update(0, "123456789", 9) == 0xE3069283u); // the CRC-32C check value (RFC 3720)
    CHECK(crc32c_update(0, "", 0) == 0);
    CHECK(crc32c_update(crc32c_update(0, "1234", 4), "56789", 5) == 0xE3069283u);
    unsigned char zeros[32] = {0};
    CHECK(crc32c_update(0, zeros, 32) == 0x8A9136AAu); // RFC 3720 B.4: 32 bytes of zeros
    const char *path = test_path("f.bin");
    CHECK(test_write_file(path, "123456789", 9) == 0);
    uint32_t c = 0;
    CHECK(crc32c_file(path, &c) == 0 && c == 0xE3069283u);
    CHECK_ERR(crc32c_file(test_path("none"), &c), "none");
}

static void test_seal(void) {
    const char *body = "{\"step\": 5, \"config\": {\"a\": [1, 2]}}\n";
    char *sealed = crc32c_seal_json(body);
    uint32_t want, got;
    CHECK(crc32c_check_seal(sealed, &want, &got) == 1);
    CHECK(crc32c_check_seal(body, &want, &got) == 0); // an older file: no seal
    cJSON *j = cJSON_Parse(sealed); // still JSON, the seal a member
    CHECK(j && cJSON_IsString(cJSON_GetObjectItem(j, "crc32c")) && cJSON_GetObjectItem(j, "step"));
    cJSON_Delete(j);
    // every single flipped bit: refused (-1), never "no seal" (0) or intact (1), except a flip that
    // keeps the text a sealed one of the same bytes (none: the CRC sees every 1-bit change)
    size_t n = strlen(sealed);
    int caught = 0, total = 0;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) {
            char *m = strdup(sealed);
            m[i] = (char)(m[i] ^ (1 << b));
            if (m[i] == '\0') { free(m); continue; } // (a NUL ends the C string: a shorter text, below)
            total++;
            int r = crc32c_check_seal(m, &want, &got);
            // a flip inside the key ", \"crc32c\": \"" leaves no seal: the callers refuse that when
            // the rest says checksums (checkpoint.c: "checksums" present, featreader: shards' /crc32c)
            int in_key = i >= n - 24 && i < n - 11;
            caught += r == -1 || (r == 0 && in_key);
            free(m);
        }
    CHECK_MSG(caught == total, "%d of %d flipped bits caught", caught, total);
    free(sealed);
}

static void test_identity_check(void) {
    run_identity a, b;
    identity_init(&a);
    identity_init(&b);
    CHECK(identity_check(&a, "x", &b, "advice") == 0); // nothing known: nothing to compare
    a.n_layer_ids = 2, a.layer_ids[0] = 0, a.layer_ids[1] = 1;
    CHECK(identity_check(&a, "x", &b, "advice") == 0); // known on one side only
    b.n_layer_ids = 1, b.layer_ids[0] = 1;
    CHECK_ERR(identity_check(&a, "data.features F", &b, "dump again"),
              "data.features F was made with target_layer_ids [0,1], this run has [1] (dump again)");
    b = a;
    snprintf(a.target_arch, sizeof a.target_arch, "qwen3");
    snprintf(b.target_arch, sizeof b.target_arch, "llama");
    a.target_layers = 2, b.target_layers = 3;
    CHECK_ERR(identity_check(&a, "x", &b, "y"), "target architecture qwen3, this run has llama; target num_hidden_layers 2, this run has 3");
    b = a;
    int64_t la[3] = {5, 6, 7}, lb[3] = {5, 7, 6};
    identity_set_data(&a, la, 3);
    identity_set_data(&b, lb, 3);
    CHECK(a.data_samples == 3 && a.data_lengths_crc != b.data_lengths_crc);
    CHECK_ERR(identity_check(&a, "x", &b, "y"), "training-set lengths CRC32C");
    identity_set_data(&b, la, 2);
    CHECK_ERR(identity_check(&a, "x", &b, "y"), "training-set samples 3, this run has 2");
    // the JSON round trip keeps every field
    identity_set_data(&b, la, 3);
    a.target_config_crc = 0xdeadbeef;
    snprintf(a.feature_convention, sizeof a.feature_convention, "hidden_states[id+1]");
    char *text = identity_to_json(&a);
    cJSON *j = cJSON_Parse(text);
    run_identity c;
    CHECK(identity_from_json(j, "t", &c) == 0);
    CHECK(identity_check(&a, "x", &c, "y") == 0 && c.target_config_crc == 0xdeadbeef && c.n_layer_ids == 2 &&
          c.data_lengths_crc == a.data_lengths_crc && strcmp(c.target_arch, "qwen3") == 0);
    cJSON_Delete(j);
    free(text);
    j = cJSON_Parse("{\"target_layer_ids\": [1, -2]}");
    CHECK_ERR(identity_from_json(j, "where", &c), "where: identity \"target_layer_ids\"[1] is not a layer id");
    cJSON_Delete(j);
}

int main(void) {
    test_crc();
    test_seal();
    test_identity_check();
    return test_finish("test_identity");
}
