// h5safe.c: defensive HDF5 reading (see h5safe.h): quiet errors, type names, stored-in-file
// datasets, checked attribute reads and the child process that reads variable-length strings.
#include "common/data/h5safe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/error.h"

#define H5SAFE_MAX_STR ((size_t)1 << 20) // a string attribute past 1 MiB is corrupt, not a name
#define H5SAFE_CHILD_MS 10000           // the child's time to read one string (a corrupt heap may loop)

h5safe_quiet h5safe_quiet_begin(void) {
    h5safe_quiet s = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &s.func, &s.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return s;
}

void h5safe_quiet_end(h5safe_quiet s) { H5Eset_auto2(H5E_DEFAULT, s.func, s.data); }

// One line: an I/O failure's description ("file write failed: time = ..., errno = 28, error message
// = '...', ...", over two lines) becomes "file write failed: No space left on device"; any other
// description is cut at its first line break.
static herr_t error_walk(unsigned n, const H5E_error2_t *err, void *data) {
    if (n != 0 || !err->desc) return 0;
    char *buf = data;
    const char *en = strstr(err->desc, "errno = "), *colon = strchr(err->desc, ':');
    if (en && colon && colon < en) {
        snprintf(buf, 256, "%.*s: %s", (int)(colon - err->desc), err->desc, strerror(atoi(en + 8)));
    } else {
        snprintf(buf, 256, "%s", err->desc);
        buf[strcspn(buf, "\r\n")] = '\0';
    }
    return 0;
}

const char *h5safe_error(char buf[256]) {
    snprintf(buf, 256, "unknown HDF5 error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, error_walk, buf);
    return buf;
}

const char *h5safe_type_name(hid_t type, char *buf, size_t n) {
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    if (cls == H5T_INTEGER)
        snprintf(buf, n, "%s%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", 8 * size);
    else if (cls == H5T_FLOAT) snprintf(buf, n, "float%zu", 8 * size);
    else if (cls == H5T_STRING) snprintf(buf, n, "string");
    else if (cls == H5T_ENUM) snprintf(buf, n, "enum");
    else if (cls == H5T_COMPOUND) snprintf(buf, n, "compound");
    else if (cls == H5T_VLEN) snprintf(buf, n, "vlen");
    else snprintf(buf, n, "HDF5 type class %d", (int)cls);
    return buf;
}

int h5safe_open_dataset(hid_t file, const char *path, const char *name, const char *missing_hint, hid_t *out) {
    char e[256];
    htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
    if (exists < 0) return error_set("%s: %s: %s", path, name, h5safe_error(e));
    if (exists == 0) return error_set("%s: missing dataset %s%s", path, name, missing_hint ? missing_hint : "");
    H5L_info_t info;
    if (H5Lget_info(file, name, &info, H5P_DEFAULT) < 0) return error_set("%s: %s: %s", path, name, h5safe_error(e));
    if (info.type == H5L_TYPE_EXTERNAL)
        return error_set("%s: %s is an external link (its data lies in another file, which HDF5 would open): store the"
                         " dataset in the file itself", path, name);
    if (info.type != H5L_TYPE_HARD)
        return error_set("%s: %s is a soft or user-defined link, not a dataset stored under that name", path, name);
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) return error_set("%s: cannot open dataset %s: %s", path, name, h5safe_error(e));
    *out = d;
    if (h5safe_check_stored(d, path, name) < 0) return -1;
    // Its size against what the file stores, before anyone allocates or reads by it: a dataset whose
    // dimensions promise more than its stored bytes can hold (even compressed: deflate's ratio is at
    // most about 1032) has unallocated chunks, read as fill values for ever (a crafted 2^40).
    hid_t space = H5Dget_space(d), type = H5Dget_type(d);
    hssize_t points = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    size_t elem = type >= 0 ? H5Tget_size(type) : 0;
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (points < 0 || elem == 0) return error_set("%s: dataset %s: cannot read its shape: %s", path, name, h5safe_error(e));
    double logical = (double)points * (double)elem, stored = (double)H5Dget_storage_size(d);
    if (logical > 2048.0 * stored + (double)(1 << 20))
        return error_set("%s: dataset %s holds %lld elements (%.3g bytes) but the file stores %.0f bytes of it: its data is"
                         " not in the file (unallocated chunks), refused before it is read", path, name,
                         (long long)points, logical, stored);
    return 0;
}

int h5safe_check_stored(hid_t d, const char *path, const char *name) {
    char e[256];
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) return error_set("%s: dataset %s: cannot read its layout: %s", path, name, h5safe_error(e));
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int external = H5Pget_external_count(dcpl);
    H5Pclose(dcpl);
    if (layout < 0 || external < 0)
        return error_set("%s: dataset %s: cannot read its layout: %s", path, name, h5safe_error(e));
    if (layout == H5D_VIRTUAL)
        return error_set("%s: dataset %s is a virtual dataset (its data comes from other files, or is filled "
                         "in when they are missing); store the data in the file itself", path, name);
    if (external > 0)
        return error_set("%s: dataset %s has external storage (%d raw file(s) outside this file); store the "
                         "data in the file itself", path, name, external);
    return 0;
}

// The attribute's element count, -1 (error_set) when its dataspace cannot be read.
static int64_t attr_points(hid_t a, const char *path, const char *name) {
    char e[256];
    hid_t space = H5Aget_space(a);
    hssize_t np = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
    if (space >= 0) H5Sclose(space);
    if (np < 0) return error_set("%s: attribute '%s' is corrupt (its dataspace: %s)", path, name, h5safe_error(e));
    return (int64_t)np;
}

int h5safe_attr_int(hid_t a, const char *path, const char *name, int64_t *v, int max) {
    char e[256], tn[64];
    hid_t type = H5Aget_type(a);
    if (type < 0) return error_set("%s: attribute '%s' is corrupt (its type: %s)", path, name, h5safe_error(e));
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    h5safe_type_name(type, tn, sizeof tn);
    H5Tclose(type);
    if (cls != H5T_INTEGER) return error_set("%s: attribute '%s' has type %s, expected an integer", path, name, tn);
    if (size < 1 || size > 8) return error_set("%s: attribute '%s' is a %zu-byte integer, at most 8 are read", path, name, size);
    int64_t np = attr_points(a, path, name);
    if (np < 0) return -1;
    if (np < 1 || np > max)
        return error_set("%s: attribute '%s' has %lld values, expected %s%d", path, name, (long long)np,
                         max > 1 ? "1 to " : "", max);
    hsize_t stored = H5Aget_storage_size(a);
    if (stored != (hsize_t)np * size)
        return error_set("%s: attribute '%s' is corrupt (%llu bytes stored for %lld values of %zu bytes)", path, name,
                         (unsigned long long)stored, (long long)np, size);
    if (H5Aread(a, H5T_NATIVE_INT64, v) < 0)
        return error_set("%s: attribute '%s' is corrupt (%s)", path, name, h5safe_error(e));
    return (int)np;
}

int h5safe_root_attr_int(hid_t obj, const char *path, const char *name, int64_t *v, int max) {
    char e[256];
    htri_t exists = H5Aexists(obj, name);
    if (exists < 0) return error_set("%s: attribute '%s': %s", path, name, h5safe_error(e));
    if (exists == 0) return error_set("%s: missing root attribute %s", path, name);
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return error_set("%s: attribute '%s': %s", path, name, h5safe_error(e));
    int rc = h5safe_attr_int(a, path, name, v, max);
    H5Aclose(a);
    return rc;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// The child: read the string, send [1 byte ok][8 bytes length][the bytes] and exit without any
// clean-up (no atexit handlers, no leak check: the process is a copy of the caller).
static void vlen_child(hid_t a, hid_t type, int fd, size_t n) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
    }
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(type));
    char *s = NULL;
    unsigned char ok = H5Aread(a, mt, &s) >= 0;
    uint64_t len = ok && s ? strlen(s) : 0;
    if (len > n - 1) len = n - 1;
    int rc = write_all(fd, &ok, 1) || write_all(fd, &len, sizeof len) || (len && write_all(fd, s, (size_t)len));
    _exit(rc ? 3 : 0);
}

// Read a variable-length string attribute in a child process (h5safe.h says why).
static int attr_vlen_str(hid_t a, hid_t type, const char *path, const char *name, char *out, size_t n) {
    int fds[2];
    if (pipe(fds) != 0) return error_set("%s: attribute '%s': pipe: %s", path, name, strerror(errno));
    fflush(NULL); // nothing buffered is written twice
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        return error_set("%s: attribute '%s': fork: %s", path, name, strerror(err));
    }
    if (pid == 0) {
        close(fds[0]);
        vlen_child(a, type, fds[1], n);
    }
    close(fds[1]);
    size_t cap = 1 + 8 + n, got = 0;
    unsigned char *msg = xmalloc(cap);
    int64_t deadline = now_ms() + H5SAFE_CHILD_MS;
    int timed_out = 0;
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            timed_out = r == 0;
            break;
        }
        ssize_t k = read(fds[0], msg + got, cap - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break; // EOF: the child is done (or dead)
        got += (size_t)k;
        if (got == cap) break;
    }
    close(fds[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    uint64_t len = 0;
    if (got >= 9) memcpy(&len, msg + 1, sizeof len);
    int complete = got >= 9 && len < n && got == 9 + len && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    int rc = 0;
    if (timed_out)
        rc = error_set("%s: attribute '%s' is corrupt (reading its string from the global heap did not end in %d s)",
                       path, name, H5SAFE_CHILD_MS / 1000);
    else if (!complete)
        rc = error_set("%s: attribute '%s' is corrupt (reading its string from the global heap crashed the HDF5 "
                       "library%s)", path, name, WIFSIGNALED(status) ? "" : " or failed");
    else if (!msg[0])
        rc = error_set("%s: attribute '%s' is corrupt (HDF5 cannot read its string from the global heap)", path, name);
    else {
        memcpy(out, msg + 9, (size_t)len);
        out[len] = '\0';
    }
    free(msg);
    return rc;
}

int h5safe_attr_str(hid_t a, const char *path, const char *name, char *out, size_t n) {
    char e[256], tn[64];
    out[0] = '\0';
    hid_t type = H5Aget_type(a);
    if (type < 0) return error_set("%s: attribute '%s' is corrupt (its type: %s)", path, name, h5safe_error(e));
    int rc = 0;
    int64_t np = 0;
    if (H5Tget_class(type) != H5T_STRING) {
        rc = error_set("%s: attribute '%s' has type %s, expected a string", path, name,
                       h5safe_type_name(type, tn, sizeof tn));
    } else if ((np = attr_points(a, path, name)) < 0) {
        rc = -1;
    } else if (np != 1) {
        rc = error_set("%s: attribute '%s' has %lld values, expected one string", path, name, (long long)np);
    } else {
        htri_t vlen = H5Tis_variable_str(type);
        size_t size = H5Tget_size(type);
        hsize_t stored = H5Aget_storage_size(a);
        if (vlen < 0) {
            rc = error_set("%s: attribute '%s' is corrupt (its type: %s)", path, name, h5safe_error(e));
        } else if (vlen) {
            rc = attr_vlen_str(a, type, path, name, out, n);
        } else if (size < 1 || size > H5SAFE_MAX_STR || stored != size) {
            rc = error_set("%s: attribute '%s' is corrupt (a string of %zu bytes, %llu stored)", path, name, size,
                           (unsigned long long)stored);
        } else {
            char *buf = xcalloc(size + 1, 1);
            hid_t mt = H5Tcopy(type);
            if (mt < 0 || H5Aread(a, mt, buf) < 0)
                rc = error_set("%s: attribute '%s' is corrupt (%s)", path, name, h5safe_error(e));
            else snprintf(out, n, "%s", buf);
            if (mt >= 0) H5Tclose(mt);
            free(buf);
        }
    }
    H5Tclose(type);
    return rc;
}
