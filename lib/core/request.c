/*
 * request.c — see request.h: copying, comparing and freeing descriptions, and the sizes they
 * describe.
 */
#include "request.h"

#include <stdlib.h>
#include <string.h>

void wire_request_free(struct wire_request *request)
{
    free(request->name);
    free(request->group);
    free(request->members);
    request->name = NULL;
    request->group = NULL;
    request->members = NULL;
    request->member_count = 0;
}

const char *request_collective_name(const struct wire_request *request)
{
    return request->collective == COLLECTIVE_PROCESS_SET
               ? "process set change"
               : chorus_collective_name((chorus_collective)request->collective);
}

bool response_applies_to(const struct wire_response *response, int rank)
{
    return response->type != RESPONSE_ERROR || response->first_dim_count == 0 || rank < 0 ||
           (uint32_t)rank >= response->first_dim_count || response->first_dims[rank] != 0;
}

bool wire_request_equal(const struct wire_request *a, const struct wire_request *b)
{
    if (a->collective != b->collective || a->dtype != b->dtype || a->op != b->op ||
        a->ndims != b->ndims || a->root != b->root || a->device != b->device ||
        a->compression != b->compression || a->group_size != b->group_size ||
        a->even_split != b->even_split ||
        a->process_set != b->process_set || a->member_count != b->member_count ||
        memcmp(&a->prescale, &b->prescale, sizeof a->prescale) != 0 ||
        memcmp(&a->postscale, &b->postscale, sizeof a->postscale) != 0)
        return false;
    if (memcmp(a->shape, b->shape, a->ndims * sizeof a->shape[0]) != 0 ||
        (a->member_count > 0 &&
         memcmp(a->members, b->members, a->member_count * sizeof a->members[0]) != 0))
        return false;
    return strcmp(a->name ? a->name : "", b->name ? b->name : "") == 0 &&
           strcmp(a->group ? a->group : "", b->group ? b->group : "") == 0;
}

bool wire_request_copy(struct wire_request *to, const struct wire_request *from)
{
    *to = *from;
    to->name = strdup(from->name ? from->name : "");
    to->group = strdup(from->group ? from->group : "");
    to->members = NULL;
    if (from->member_count > 0) {
        to->members = malloc(from->member_count * sizeof *to->members);
        if (to->members != NULL)
            memcpy(to->members, from->members, from->member_count * sizeof *to->members);
    }
    if (to->name == NULL || to->group == NULL || (from->member_count > 0 && to->members == NULL)) {
        wire_request_free(to);
        return false;
    }
    return true;
}

void wire_response_free(struct wire_response *response)
{
    free(response->message);
    free(response->first_dims);
    wire_request_free(&response->request);
    memset(response, 0, sizeof *response);
}

void request_free(struct request *request)
{
    if (request == NULL)
        return;
    wire_request_free(&request->desc);
    free(request->splits);
    free(request);
}

size_t request_elements(const struct wire_request *request)
{
    size_t count = 1;
    for (size_t i = 0; i < request->ndims; i++)
        count *= (size_t)request->shape[i];
    return count;
}

size_t response_bytes(const struct wire_response *response)
{
    return request_elements(&response->request) *
           chorus_dtype_size((chorus_dtype)response->request.dtype);
}

size_t allgather_row_bytes(const struct wire_request *request)
{
    size_t row_bytes = chorus_dtype_size((chorus_dtype)request->dtype);
    for (size_t i = 1; i < request->ndims; i++)
        row_bytes *= (size_t)request->shape[i];
    return row_bytes;
}

size_t batch_member_bytes(const struct wire_response *response)
{
    if (response->request.collective != CHORUS_ALLGATHER)
        return response_bytes(response);
    int64_t rows = 0;
    for (uint32_t r = 0; r < response->first_dim_count; r++)
        rows += response->first_dims[r];
    return (size_t)rows * allgather_row_bytes(&response->request);
}
