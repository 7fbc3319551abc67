/*
 * negotiated_fields.c — see negotiated_fields.h: the table of negotiated fields, and the
 * comparisons every user of it shares. The rows' order is the wire order and the order in
 * which mismatches are looked for (the first one found is reported).
 */
#include "negotiated_fields.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----- how values print ------------------------------------------------------------------- */

static void format_collective(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", request_collective_name(r));
}

static void format_name(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "\"%s\"", r->name ? r->name : "");
}

static void format_process_set(const struct wire_request *r, char *text, size_t size)
{
    if (r->process_set == 0)
        snprintf(text, size, "global");
    else
        snprintf(text, size, "%d", r->process_set);
}

/* A process set's ranks, as an add names them. */
static void format_members(const struct wire_request *r, char *text, size_t size)
{
    char *ranks = text_rank_list(r->members, r->member_count);
    snprintf(text, size, "{%s}", r->member_count == 0 ? "removal" : ranks ? ranks : "?");
    free(ranks);
}

static void format_dtype(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", chorus_dtype_name(r->dtype));
}

static void format_device(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", r->device == DEVICE_HOST ? "host" : "gpu");
}

static void format_dims(const struct wire_request *r, size_t first, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "[");
    for (size_t i = first; i < r->ndims && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%lld", i > first ? "," : "",
                                 (long long)r->shape[i]);
    if (used < size)
        snprintf(text + used, size - used, "]");
}

static void format_shape(const struct wire_request *r, char *text, size_t size)
{
    format_dims(r, 0, text, size);
}

/* Allgather and alltoall: every dimension but the first, and the number of dimensions. */
static void format_row_shape(const struct wire_request *r, char *text, size_t size)
{
    if (r->ndims == 0) {
        snprintf(text, size, "scalar");
        return;
    }
    char dims[256];
    format_dims(r, 1, dims, sizeof dims);
    snprintf(text, size, "[*%s%s", r->ndims > 1 ? "," : "", dims + 1);
}

static void format_op(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", chorus_op_name(r->op));
}

static void format_root(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%d", r->root);
}

static void format_prescale(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%.17g", r->prescale);
}

static void format_postscale(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%.17g", r->postscale);
}

static void format_compression(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", dtype_compression_name(r->compression));
}

static void format_compression_ratio(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%.17g", r->compression_ratio);
}

static void format_group(const struct wire_request *r, char *text, size_t size)
{
    if (r->group_size <= 1)
        snprintf(text, size, "none");
    else
        snprintf(text, size, "\"%s\" of %u", r->group, r->group_size);
}

static void format_group_size(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%u", r->group_size);
}

static void format_even_split(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", r->even_split ? "even" : "uneven");
}

static void format_in_shared_heap(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", r->in_shared_heap ? "in the shared heap" : "elsewhere");
}

/* ----- agreement other than equality ------------------------------------------------------ */

/* Ranks agree on where a tensor lives (host or GPU), not on which GPU. */
static bool devices_agree(const struct wire_request *a, const struct wire_request *b)
{
    return (a->device == DEVICE_HOST) == (b->device == DEVICE_HOST);
}

/* Allgather and alltoall: ranks may send different numbers of rows. */
static bool row_shapes_agree(const struct wire_request *a, const struct wire_request *b)
{
    if (a->ndims != b->ndims)
        return false;
    for (size_t i = 1; i < a->ndims; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

static bool groups_agree(const struct wire_request *a, const struct wire_request *b)
{
    return a->group_size == b->group_size &&
           strcmp(a->group ? a->group : "", b->group ? b->group : "") == 0;
}

/* ----- the digests of agreement other than equality -------------------------------------- */

static void mix_text(uint64_t *hash, const char *text)
{
    size_t length = text != NULL ? strlen(text) : 0;
    negotiated_digest_mix(hash, length);
    for (size_t at = 0; at < length; at += 8) {
        uint64_t word = 0;
        memcpy(&word, text + at, length - at < 8 ? length - at : 8);
        negotiated_digest_mix(hash, word);
    }
}

static void device_digest(const struct wire_request *r, uint64_t *hash)
{
    negotiated_digest_mix(hash, r->device == DEVICE_HOST);
}

static void row_shape_digest(const struct wire_request *r, uint64_t *hash)
{
    negotiated_digest_mix(hash, r->ndims);
    for (size_t i = 1; i < r->ndims; i++)
        negotiated_digest_mix(hash, (uint64_t)r->shape[i]);
}

static void group_digest(const struct wire_request *r, uint64_t *hash)
{
    negotiated_digest_mix(hash, r->group_size);
    mix_text(hash, r->group);
}

/* ----- what a decoded value may be -------------------------------------------------------- */

static const char *check_collective(const struct wire_request *r)
{
    return dtype_collective_is_valid(r->collective) || r->collective == COLLECTIVE_PROCESS_SET
               ? NULL
               : "unknown collective";
}

static const char *check_dtype(const struct wire_request *r)
{
    return dtype_is_valid(r->dtype) ? NULL : "unknown dtype";
}

static const char *check_op(const struct wire_request *r)
{
    return dtype_op_is_valid(r->op) ? NULL : "unknown reduction operator";
}

static const char *check_process_set(const struct wire_request *r)
{
    return r->process_set >= 0 ? NULL : "negative process set";
}

static const char *check_group_size(const struct wire_request *r)
{
    return r->group_size != 0 ? NULL : "group size 0";
}

static const char *check_compression(const struct wire_request *r)
{
    return r->compression <= DTYPE_COMPRESSION_LAST ? NULL : "unknown compression";
}

static const char *check_compression_ratio(const struct wire_request *r)
{
    bool topk = r->compression == CHORUS_COMPRESSION_TOPK;
    return (topk && r->compression_ratio > 0 && r->compression_ratio <= 1) ||
                   (!topk && r->compression_ratio == 0)
               ? NULL
               : "compression ratio outside (0, 1], or without topk";
}

static const char *check_even_split(const struct wire_request *r)
{
    return r->even_split <= 1 ? NULL : "even_split neither 0 nor 1";
}

static const char *check_in_shared_heap(const struct wire_request *r)
{
    return r->in_shared_heap <= 1 ? NULL : "in_shared_heap neither 0 nor 1";
}

/* An alltoall member splits evenly with the same rows: then the ranks know every block's size
 * and place without exchanging their splits. */
static bool splits_evenly(const struct wire_request *member, const struct wire_request *reference)
{
    return member->even_split && member->shape[0] == reference->shape[0];
}

/* An allreduce member's result buffer lies in the shared heap. */
static bool in_shared_heap(const struct wire_request *member, const struct wire_request *reference)
{
    (void)reference;
    return member->in_shared_heap;
}

/* ----- the table -------------------------------------------------------------------------- */

#define C(collective) FIELD_COLLECTIVE(collective)
#define AT(member) offsetof(struct wire_request, member)
#define REDUCING (C(CHORUS_ALLREDUCE) | C(CHORUS_REDUCESCATTER))
#define ROWS_MAY_DIFFER (C(CHORUS_ALLGATHER) | C(CHORUS_ALLTOALL))

const struct negotiated_field negotiated_fields[] = {
    {.name = "name", .encoding = FIELD_TEXT, .offset = AT(name), .cache_key = true,
     .format = format_name},
    /* First: a different collective makes every other comparison meaningless. */
    {.name = "collective", .encoding = FIELD_U8, .offset = AT(collective),
     .agree = FIELD_EVERY_REQUEST, .cache_key = true, .format = format_collective,
     .check = check_collective},
    {.name = "process set", .encoding = FIELD_I32, .offset = AT(process_set),
     .agree = FIELD_ALL_TENSORS, .cache_key = true, .format = format_process_set,
     .check = check_process_set},
    {.name = "ranks", .encoding = FIELD_MEMBERS, .offset = AT(members),
     .agree = C(COLLECTIVE_PROCESS_SET), .cache_key = true, .format = format_members},
    {.name = "dtype", .encoding = FIELD_U8, .offset = AT(dtype), .agree = FIELD_ALL_TENSORS,
     .cache_key = true, .format = format_dtype, .check = check_dtype},
    {.name = "device", .encoding = FIELD_I32, .offset = AT(device), .agree = FIELD_ALL_TENSORS,
     .cache_key = true, .agrees = devices_agree,
     .digest = device_digest, .format = format_device},
    {.name = "shape", .encoding = FIELD_SHAPE, .offset = AT(shape),
     .agree = FIELD_ALL_TENSORS & ~ROWS_MAY_DIFFER, .cache_key = true, .format = format_shape},
    {.name = "shape", .encoding = FIELD_VIRTUAL, .agree = ROWS_MAY_DIFFER,
     .agrees = row_shapes_agree,
     .digest = row_shape_digest, .format = format_row_shape},
    {.name = "op", .encoding = FIELD_U8, .offset = AT(op), .agree = REDUCING, .cache_key = true,
     .format = format_op, .check = check_op},
    {.name = "root", .encoding = FIELD_I32, .offset = AT(root), .agree = C(CHORUS_BROADCAST),
     .cache_key = true, .format = format_root},
    {.name = "prescale factor", .encoding = FIELD_F64, .offset = AT(prescale),
     .agree = REDUCING, .cache_key = true, .format = format_prescale},
    {.name = "postscale factor", .encoding = FIELD_F64, .offset = AT(postscale),
     .agree = REDUCING, .cache_key = true, .format = format_postscale},
    {.name = "compression", .encoding = FIELD_U8, .offset = AT(compression),
     .agree = C(CHORUS_ALLREDUCE), .cache_key = true, .format = format_compression,
     .check = check_compression},
    {.name = "compression ratio", .encoding = FIELD_F64, .offset = AT(compression_ratio),
     .agree = C(CHORUS_ALLREDUCE), .cache_key = true, .format = format_compression_ratio,
     .check = check_compression_ratio},
    /* Grouped or not, and which group: for every collective, grouped ones and those that
     * cannot be grouped alike (where a group's members must be submitted together). */
    {.name = "group", .encoding = FIELD_TEXT, .offset = AT(group), .agree = FIELD_EVERY_REQUEST,
     .cache_key = true, .agrees = groups_agree,
     .digest = group_digest, .format = format_group},
    {.name = "group size", .encoding = FIELD_U32, .offset = AT(group_size), .cache_key = true,
     .format = format_group_size, .check = check_group_size},
    /* Each rank's own: whether it splits an alltoall evenly. */
    {.name = "even split", .encoding = FIELD_U8, .offset = AT(even_split), .cache_key = true,
     .format = format_even_split, .check = check_even_split, .member_has = splits_evenly,
     .combined = C(CHORUS_ALLTOALL)},
    /* Each rank's own: whether its allreduce's buffer lies in the shared heap. */
    {.name = "shared heap", .encoding = FIELD_U8, .offset = AT(in_shared_heap),
     .cache_key = true, .format = format_in_shared_heap, .check = check_in_shared_heap,
     .member_has = in_shared_heap, .combined = C(CHORUS_ALLREDUCE)},
};
const size_t negotiated_field_count = ARRAY_LENGTH(negotiated_fields);

/* Every field of struct wire_request is a row here or the cache form (cached, cache_slot):
 * a new member must be given a row. */
static_assert(sizeof(struct wire_request) ==
                  offsetof(struct wire_request, cache_slot) + sizeof(uint32_t),
              "struct wire_request changed: update negotiated_fields");

/* Whether `collective` is one of the FIELD_COLLECTIVE bits of `mask`. */
static bool collective_in(uint32_t mask, unsigned collective)
{
    return collective < 32 && (mask & FIELD_COLLECTIVE(collective)) != 0;
}

void negotiated_fields_combine(struct wire_request *response,
                               const struct wire_request *reference,
                               const struct wire_request *member)
{
    for (size_t i = 0; i < negotiated_field_count; i++) {
        const struct negotiated_field *field = &negotiated_fields[i];
        if (field->member_has == NULL || !collective_in(field->combined, reference->collective))
            continue;
        if (member == NULL || !field->member_has(member, reference))
            *((uint8_t *)response + field->offset) = 0; /* FIELD_U8, as every such flag */
    }
}

bool negotiated_field_applies(const struct negotiated_field *field, unsigned collective)
{
    return collective_in(field->agree, collective);
}

#define VALUE(type, request, field) (*(const type *)((const char *)(request) + (field)->offset))

bool negotiated_field_equal(const struct negotiated_field *field, const struct wire_request *a,
                            const struct wire_request *b)
{
    switch (field->encoding) {
    case FIELD_VIRTUAL:
        return field->agrees == NULL || field->agrees(a, b);
    case FIELD_U8:
        return VALUE(uint8_t, a, field) == VALUE(uint8_t, b, field);
    case FIELD_I32:
        return VALUE(int32_t, a, field) == VALUE(int32_t, b, field);
    case FIELD_U32:
        return VALUE(uint32_t, a, field) == VALUE(uint32_t, b, field);
    case FIELD_F64: /* bit for bit: the values the message prints */
        return memcmp(&VALUE(double, a, field), &VALUE(double, b, field), sizeof(double)) == 0;
    case FIELD_TEXT: {
        const char *x = VALUE(char *, a, field), *y = VALUE(char *, b, field);
        return strcmp(x ? x : "", y ? y : "") == 0;
    }
    case FIELD_SHAPE:
        return a->ndims == b->ndims &&
               memcmp(a->shape, b->shape, a->ndims * sizeof a->shape[0]) == 0;
    case FIELD_MEMBERS:
        return a->member_count == b->member_count &&
               (a->member_count == 0 ||
                memcmp(a->members, b->members, a->member_count * sizeof *a->members) == 0);
    }
    return false;
}

bool negotiated_fields_agree(const struct wire_request *a, const struct wire_request *b)
{
    if (a->collective != b->collective)
        return false;
    for (size_t i = 0; i < negotiated_field_count; i++) {
        const struct negotiated_field *field = &negotiated_fields[i];
        if (!negotiated_field_applies(field, a->collective))
            continue;
        bool agree = field->agrees != NULL ? field->agrees(a, b)
                                           : negotiated_field_equal(field, a, b);
        if (!agree)
            return false;
    }
    return true;
}

/* Mixes a field compared for equality: its value, as negotiated_field_equal compares it. */
static void mix_value(uint64_t *hash, const struct negotiated_field *field,
                      const struct wire_request *r)
{
    switch (field->encoding) {
    case FIELD_VIRTUAL:
        break;
    case FIELD_U8:
        negotiated_digest_mix(hash, VALUE(uint8_t, r, field));
        break;
    case FIELD_I32:
        negotiated_digest_mix(hash, (uint32_t)VALUE(int32_t, r, field));
        break;
    case FIELD_U32:
        negotiated_digest_mix(hash, VALUE(uint32_t, r, field));
        break;
    case FIELD_F64: {
        uint64_t bits;
        memcpy(&bits, &VALUE(double, r, field), sizeof bits);
        negotiated_digest_mix(hash, bits);
        break;
    }
    case FIELD_TEXT:
        mix_text(hash, VALUE(char *, r, field));
        break;
    case FIELD_SHAPE:
        negotiated_digest_mix(hash, r->ndims);
        for (size_t i = 0; i < r->ndims; i++)
            negotiated_digest_mix(hash, (uint64_t)r->shape[i]);
        break;
    case FIELD_MEMBERS:
        negotiated_digest_mix(hash, r->member_count);
        for (size_t i = 0; i < r->member_count; i++)
            negotiated_digest_mix(hash, (uint32_t)r->members[i]);
        break;
    }
}

uint64_t negotiated_fields_digest(const struct wire_request *request)
{
    uint64_t hash = 0x63686f72757321ull;
    for (size_t i = 0; i < negotiated_field_count; i++) {
        const struct negotiated_field *field = &negotiated_fields[i];
        if (!negotiated_field_applies(field, request->collective))
            continue;
        negotiated_digest_mix(&hash, i);
        if (field->agrees != NULL)
            field->digest(request, &hash);
        else
            mix_value(&hash, field, request);
    }
    return hash;
}

bool wire_request_equal(const struct wire_request *a, const struct wire_request *b)
{
    for (size_t i = 0; i < negotiated_field_count; i++)
        if (negotiated_fields[i].cache_key &&
            !negotiated_field_equal(&negotiated_fields[i], a, b))
            return false;
    return true;
}
