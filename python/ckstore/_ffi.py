"""The C declarations of libckstore (include/ckstore.h) for cffi's ABI mode,
and the loading of the shared library.

cffi's ABI mode reads these declarations at import time and calls the library
through libffi: nothing is compiled when the package is installed. Where the
library is: $CKSTORE_LIB, else $CKSTORE_BUILD/client-lib, else the one the
install step recorded (an installed package) or the checkout's build/ or
build-test/ (a source checkout), else the dynamic linker's search path. The
structs must match include/ckstore.h field for field; tests/python checks
their sizes against the ones the C compiler gives
(tests/python/test_client.py, test_abi_sizes_match_the_c_compiler).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from cffi import FFI

CDEF = r"""
typedef int cks_status_t;
typedef int cks_vstate_t;
typedef int cks_kind_t;
typedef int cks_mem_type_t;

const char *cks_vstate_string(cks_vstate_t state);
const char *cks_kind_string(cks_kind_t kind);
const char *cks_status_string(cks_status_t status);
const char *cks_status_name(cks_status_t status);

typedef struct cks_client *cks_client_h;
typedef struct cks_restore *cks_restore_h;
typedef void (*cks_done_cb_t)(void *arg, cks_status_t status);

typedef struct {
    uint64_t field_mask;
    const char *server;
    int timeout_ms;
    const char *name;
    const char *cluster;
    uint32_t ec_k;
    uint32_t ec_m;
    uint64_t chunk_size;
    const char *secret;
    const char *secret_job;
    uint64_t scratch_size;
    uint64_t stage_slice;
    uint32_t stage_slices;
    uint32_t member_timeout_ms;
} cks_client_params_t;

cks_status_t cks_client_create(const cks_client_params_t *params, cks_client_h *client_p);
void cks_client_destroy(cks_client_h client);
void cks_client_last_error(cks_client_h client, char *buf, size_t len);

typedef struct {
    uint64_t field_mask;
    const char *job;
    uint64_t version;
    uint64_t parent;
    uint32_t nranks;
    uint32_t retain;
    uint32_t timeout_s;
} cks_version_params_t;

cks_status_t cks_version_begin_nb(cks_client_h c, const cks_version_params_t *p,
                                  cks_done_cb_t cb, void *arg);
cks_status_t cks_version_begin(cks_client_h c, const cks_version_params_t *p);
cks_status_t cks_version_finish_nb(cks_client_h c, const char *job, uint64_t version,
                                   uint32_t rank, cks_done_cb_t cb, void *arg);
cks_status_t cks_version_finish(cks_client_h c, const char *job, uint64_t version,
                                uint32_t rank);
cks_status_t cks_object_delete(cks_client_h c, const char *job, uint64_t version,
                               const char *key);

typedef struct {
    uint32_t servers;
    uint32_t answered;
    uint64_t arena_used;
    uint64_t arena_capacity;
    uint64_t encoded_bytes;
    uint64_t encode_cpu_ns;
    uint64_t encoder_cpu_ns;
} cks_cluster_stats_t;

cks_status_t cks_cluster_stats(cks_client_h c, cks_cluster_stats_t *stats_p);
cks_status_t cks_version_seal_nb(cks_client_h c, const char *job, uint64_t version,
                                 cks_done_cb_t cb, void *arg);
cks_status_t cks_version_seal(cks_client_h c, const char *job, uint64_t version);
cks_status_t cks_version_abort(cks_client_h c, const char *job, uint64_t version);
cks_status_t cks_version_delete(cks_client_h c, const char *job, uint64_t version);

typedef struct {
    uint64_t version;
    uint64_t parent;
    cks_vstate_t state;
    uint32_t nranks;
    uint64_t created_ns;
    uint64_t sealed_ns;
    uint64_t nobjects;
    uint64_t bytes;
    uint32_t ec_k, ec_m;
    uint64_t chunk_size;
    uint32_t redundancy;
    uint64_t missing;
} cks_version_info_t;

cks_status_t cks_version_stat(cks_client_h c, const char *job, uint64_t version,
                              cks_version_info_t *info_p);
cks_status_t cks_version_latest(cks_client_h c, const char *job, cks_version_info_t *info_p);
cks_status_t cks_version_list(cks_client_h c, const char *job, const uint64_t *after,
                              cks_version_info_t *out, size_t max, size_t *count_p,
                              int *more_p);
cks_status_t cks_job_list(cks_client_h c, const char *after, char (*names)[129],
                          size_t max, size_t *count_p, int *more_p);

cks_status_t cks_mem_alloc(cks_client_h c, size_t size, void **ptr_p);
cks_status_t cks_mem_free(cks_client_h c, void *ptr);

typedef struct {
    cks_kind_t kind;
    int32_t layer;
    int32_t expert;
    int32_t rank;
} cks_tags_t;

typedef struct {
    uint64_t field_mask;
    const char *job;
    uint64_t version;
    const char *key;
    const void *buffer;
    uint64_t size;
    cks_tags_t tags;
    cks_mem_type_t mem_type;
    cks_done_cb_t copied_cb;
    void *copied_arg;
} cks_put_params_t;

cks_status_t cks_put_nb(cks_client_h c, const cks_put_params_t *p, cks_done_cb_t cb,
                        void *arg);
cks_status_t cks_put(cks_client_h c, const cks_put_params_t *p);

typedef struct {
    char key[257];
    cks_tags_t tags;
    uint64_t size;
    uint64_t crc64;
    uint64_t source_version;
} cks_object_info_t;

cks_status_t cks_restore_open(cks_client_h c, const char *job, uint64_t version,
                              cks_restore_h *r_p);
void cks_restore_close(cks_restore_h r);
cks_status_t cks_restore_info(cks_restore_h r, cks_version_info_t *info_p);

typedef struct {
    uint64_t version;
    cks_status_t status;
    char key[257];
    uint64_t source_version;
    uint64_t stripe;
    uint32_t intact;
    uint32_t needed;
    char reason[384];
} cks_restore_skip_t;

typedef void (*cks_restore_skip_cb_t)(void *arg, const cks_restore_skip_t *skip);

typedef struct {
    uint64_t field_mask;
    const char *job;
    uint64_t version;
    uint32_t flags;
    cks_restore_skip_cb_t skip_cb;
    void *skip_arg;
    const char *flush_dir;
} cks_restore_params_t;

cks_status_t cks_restore_open_ex(cks_client_h c, const cks_restore_params_t *p,
                                 cks_restore_h *r_p);
cks_status_t cks_object_stat(cks_restore_h r, const char *key, cks_object_info_t *info_p);
cks_status_t cks_object_list(cks_restore_h r, const char *after_key, cks_object_info_t *out,
                             size_t max, size_t *count_p, int *more_p);

typedef struct {
    uint64_t field_mask;
    cks_tags_t tags;
} cks_tag_filter_t;

cks_status_t cks_object_find(cks_restore_h r, const char *after_key,
                             const cks_tag_filter_t *filter, cks_object_info_t *out,
                             size_t max, size_t *count_p, int *more_p);

typedef struct {
    uint64_t field_mask;
    const char *key;
    void *buffer;
    uint64_t buffer_size;
    uint64_t offset;
    uint64_t length;
    cks_mem_type_t mem_type;
    uint32_t flags;
} cks_get_params_t;

cks_status_t cks_get_nb(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                        cks_done_cb_t cb, void *arg);
cks_status_t cks_get(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p);

typedef struct {
    uint64_t field_mask;
    uint32_t layers;
    uint32_t experts;
    uint32_t per_step;
    uint32_t ranks;
    uint64_t layer_offset;
    uint64_t max_age;
} cks_pec_params_t;

typedef struct {
    uint64_t period;
    uint64_t max_staleness;
    uint64_t saved_per_ckpt;
    uint32_t experts_per_rank;
    uint64_t rank_load_min;
    uint64_t rank_load_max;
} cks_pec_bounds_t;

cks_status_t cks_pec_bounds(const cks_pec_params_t *p, cks_pec_bounds_t *bounds_p);
cks_status_t cks_pec_expert_rank(const cks_pec_params_t *p, uint32_t expert, uint32_t *rank_p);
cks_status_t cks_pec_select_round_robin(const cks_pec_params_t *p, uint64_t ckpt,
                                        uint8_t *mask);
cks_status_t cks_pec_select_load_aware(const cks_pec_params_t *p,
                                       const uint64_t *tokens_since_save,
                                       const uint64_t *last_saved, uint64_t ckpt,
                                       uint8_t *mask);
cks_status_t cks_pec_note_saved(const cks_pec_params_t *p, const uint8_t *mask, uint64_t ckpt,
                                uint64_t *last_saved, uint64_t *tokens_since_save);

typedef struct {
    uint64_t max;
    double mean;
    uint64_t stale;
    uint64_t never;
} cks_pec_staleness_stats_t;

cks_status_t cks_pec_staleness(const cks_pec_params_t *p, uint64_t restored_step,
                               const uint64_t *saved_step, uint64_t *staleness,
                               cks_pec_staleness_stats_t *stats_p);
cks_status_t cks_pec_plt(const cks_pec_params_t *p, const uint64_t *tokens_lost,
                         uint64_t tokens_routed, double *plt_p);
"""

ffi = FFI()
ffi.cdef(CDEF)


def _installed() -> Optional[str]:
    """The library path the install step recorded (ckstore/_installed.py,
    written by ``cmake --install``; absent in a source checkout)."""
    try:
        from ._installed import LIB
    except ImportError:
        return None
    return LIB


def _candidates():
    env = os.environ.get("CKSTORE_LIB")
    if env:
        yield env
        return
    if os.environ.get("CKSTORE_BUILD"):
        yield str(Path(os.environ["CKSTORE_BUILD"]).resolve() / "client-lib" / "libckstore.so")
    installed = _installed()
    if installed is not None:
        # an installed package: the library installed with it
        yield installed
    else:
        # a source checkout: python/ckstore/ -> the repository's build directories
        root = Path(__file__).resolve().parent.parent.parent
        for build in ("build", "build-test"):
            yield str(root / build / "client-lib" / "libckstore.so")
    yield "libckstore.so"  # the dynamic linker's search path


def _load():
    errors = []
    for path in _candidates():
        if "/" in path and not os.path.exists(path):
            errors.append(f"{path}: not found")
            continue
        try:
            return ffi.dlopen(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "ckstore: cannot load libckstore.so (build it with scripts/build, install it "
        "with scripts/install, or set CKSTORE_LIB to its path, or CKSTORE_BUILD to the "
        "build directory): " +
        "; ".join(errors))


lib, lib_path = _load()
