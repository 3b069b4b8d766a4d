// json_util.h: reading small text files (config.json, token lists) and the cJSON helpers the
// config readers share: a parse that names the line of a syntax error, a field lookup that treats
// null as absent, typed getters (string, integer, number, boolean), a short printable form of a value for messages, a float
// written the way Python's json module writes one, and the checks cJSON does not make: a key given
// twice in one object, a NUL (\u0000) inside a string, control characters in a message.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

// file_read_text: the whole file at `path` as a NUL-terminated string (malloc'd; the caller frees).
// NULL after error_set("<path>: <reason>") when it cannot be opened (strerror), is larger than
// max_bytes, or a read fails; errno then says which: open's errno, EFBIG (too large) or EIO (a read
// error, or not a regular file: a FIFO or a device is refused, never read; fs_open_regular).
// Pass SIZE_MAX for no limit.
char *file_read_text(const char *path, size_t max_bytes);
// file_read_text_len: the same, with the number of bytes read in *len (the text may hold NUL bytes
// before that: strlen(text) < *len then).
char *file_read_text_len(const char *path, size_t max_bytes, size_t *len);

// json_parse_text: cJSON_Parse(json), or NULL after error_set("<source>: not valid JSON (near line N)"),
// or "<source>: data after the end of the JSON document (line N)" for trailing non-whitespace.
cJSON *json_parse_text(const char *json, const char *source);

// json_parse_object: a config file's text as a JSON object: json_parse_text, then NULL after
// error_set("<source>: <what> must be a JSON object") or ("<source>: key '<k>' holds a NUL
// character (\u0000), which would cut the value"). The caller frees the tree (cJSON_Delete).
cJSON *json_parse_object(const char *json, const char *source, const char *what);

// json_field: obj[key], or NULL when obj is NULL, or the key is absent or null.
const cJSON *json_field(const cJSON *obj, const char *key);

// json_value_str: a short printable form of v for error messages, cut to n bytes with "..." when long.
void json_value_str(const cJSON *v, char *buf, size_t n);

// json_add_float_py: add o[key] = v written as Python's json writes a float: the shortest text that
// reads back exactly, with ".0" on integral values (1000000.0, 8.0, 1e-06), so the Python side sees
// a float where transformers' config classes declare one.
void json_add_float_py(cJSON *o, const char *key, double v);

// json_get_string: *out = obj[key] as a string (a pointer into the tree); absent or null leaves *out
// as it is. -1 after error_set("<src>: '<name>' wants a string, got <value>") for another type.
int json_get_string(const cJSON *obj, const char *key, const char *name, const char *src, const char **out);

// The typed getters of the config readers (HF config.json, drafter config.json). Each reads obj[key]
// (json_field: absent or null counts as absent); absent leaves *out as it is and sets *found = 0
// (found may be NULL); another type is -1 after error_set("<src>: '<name>' wants ..., got <value>").
// json_int_value: v itself as an integer (a number with no fraction, |v| <= 9e15).
int json_int_value(const cJSON *v, const char *name, const char *src, int64_t *out);
int json_get_int(const cJSON *obj, const char *key, const char *name, const char *src, int64_t *out, int *found);
// json_get_positive: json_get_int, then *out (the value, or the default it kept) must be > 0
// ("'<key>' must be positive, got N").
int json_get_positive(const cJSON *obj, const char *key, const char *src, int64_t *out);
int json_get_double(const cJSON *obj, const char *key, const char *name, const char *src, double *out, int *found);
// json_get_bool: true or false only ("wants true or false").
int json_get_bool(const cJSON *obj, const char *key, const char *src, int *out, int *found);

// json_duplicate_key: the first member of object obj whose name an earlier member of obj already
// has (JSON allows it, cJSON keeps both and a reader would silently take one), or NULL.
const cJSON *json_duplicate_key(const cJSON *obj);

// json_find_nul: whether the JSON text (already parsed by cJSON, so valid) holds a \u0000 escape
// in a string, which cJSON decodes to a NUL that cuts the string. When it does, the dotted path of
// the object member that holds it (its key, or the key being named) goes to path (n bytes; "" at
// the top level) and 1 is returned; 0 when there is none.
int json_find_nul(const char *json, char *path, size_t n);

// text_one_line: src with every control character (newline, tab, ...) written as an escape (\n,
// \t, \xHH), cut to n bytes with "..." when long, so a message built from user text stays one line.
void text_one_line(const char *src, char *dst, size_t n);
