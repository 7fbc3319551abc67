/*
 * transport.h — how the ranks reach each other, the one header of lib/transport: point to point
 * over MPI or, in unit tests, between threads (point_to_point.h), and through the memory the
 * ranks of one host share (node_segment.h), with the copies that write it (streaming_copy.h).
 */
#ifndef CHORUS_TRANSPORT_H
#define CHORUS_TRANSPORT_H

#include "node_segment.h"
#include "point_to_point.h"
#include "streaming_copy.h"

#endif
