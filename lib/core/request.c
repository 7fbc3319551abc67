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
    return request_collective_number_name(request->collective);
}

const char *request_collective_number_name(int collective)
{
    switch (collective) {
    case COLLECTIVE_PROCESS_SET:
        return "process set change";
    case COLLECTIVE_BARRIER:
        return "barrier";
    }
    return chorus_collective_name((chorus_collective)collective);
}

const char *transfer_direction_name(enum transfer_direction direction)
{
    return direction == TRANSFER_SEND ? "send" : "receive";
}

const char *request_kind_name(enum request_kind kind, int collective,
                              enum transfer_direction direction)
{
    return kind == REQUEST_TRANSFER ? transfer_direction_name(direction)
                                    : request_collective_number_name(collective);
}

const char *request_operation_name(const struct request *request)
{
    return request_kind_name(request->kind, request->desc.collective, request->transfer.direction);
}

bool response_applies_to(const struct wire_response *response, int rank)
{
    return response->type != RESPONSE_ERROR || response->rank_mask_count == 0 || rank < 0 ||
           (uint32_t)rank >= response->rank_mask_count || response->rank_mask[rank] != 0;
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
    free(response->rank_mask);
    wire_request_free(&response->request);
    memset(response, 0, sizeof *response);
}

void request_free(struct request *request)
{
    if (request == NULL)
        return;
    if (request->strings_inline)
        request->desc.name = request->desc.group = NULL;
    wire_request_free(&request->desc);
    free(request->splits);
    ordered_agreement_free(request->agreed);
    if (request->release_ready != NULL)
        request->release_ready(request->ready);
    free(request);
}

void ordered_agreement_free(struct ordered_agreement *agreement)
{
    if (agreement == NULL)
        return;
    free(agreement->first_dims);
    free(agreement);
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

bool ordered_agreement_response(struct wire_response *response, const struct wire_request *desc,
                                const struct ordered_agreement *agreed)
{
    *response = (struct wire_response){.type = RESPONSE_EXECUTE,
                                       .status = CHORUS_OK,
                                       .contributors = agreed->members,
                                       .agreed_at = clock_seconds()};
    if (!wire_request_copy(&response->request, desc))
        return false;
    if (desc->collective == CHORUS_ALLGATHER) {
        response->first_dim_count = agreed->members;
        response->first_dims = calloc(agreed->members, sizeof *response->first_dims);
        if (response->first_dims == NULL)
            return false;
        memcpy(response->first_dims, agreed->first_dims,
               agreed->members * sizeof *response->first_dims);
    }
    response->request.even_split = desc->even_split && agreed->even_split;
    response->request.in_shared_heap = desc->in_shared_heap && agreed->in_shared_heap;
    return true;
}

double request_output_factor(const struct wire_request *request, uint32_t contributors)
{
    double factor = request->postscale;
    if (request->op == CHORUS_AVERAGE && contributors > 0)
        factor /= (double)contributors;
    return factor;
}

size_t allgather_row_bytes(const struct wire_request *request)
{
    size_t row_bytes = chorus_dtype_size((chorus_dtype)request->dtype);
    for (size_t i = 1; i < request->ndims; i++)
        row_bytes *= (size_t)request->shape[i];
    return row_bytes;
}

size_t request_batch_member_bytes(const struct wire_response *response)
{
    if (response->request.collective != CHORUS_ALLGATHER)
        return response_bytes(response);
    int64_t rows = 0;
    for (uint32_t r = 0; r < response->first_dim_count; r++)
        rows += response->first_dims[r];
    return (size_t)rows * allgather_row_bytes(&response->request);
}
