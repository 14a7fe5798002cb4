/*
 * reserve_resources.c - ask the rtmgr daemon (`rtmgr serve`) for CPU time and
 * the resources beside it (DROPS §4.1, §4.3-4.4): locked memory, an I/O class
 * and a share of the L3 cache, with rtmgr_reserve_with(); lock the memory
 * under the grant, say what was given, and give it back. A resource the
 * machine cannot give is refused with the numbers. See docs/serve.md
 * ("Clients") and include/rtmgr.h.
 *
 * Build: cc -std=c11 reserve_resources.c $(pkg-config --cflags --libs rtmgr-rt)
 *
 * Usage: reserve_resources [memlock_bytes] [rt|be|default] [cache_share]
 *   memlock_bytes  locked memory to ask for (default 4194304; 0: none)
 *   rt|be|default  the I/O class (default rt)
 *   cache_share    share of the L3, 0..1 (default: none asked)
 *
 * Exit status: 0 when granted, used and released, or when no daemon runs (it
 * says so); 1 when the daemon refused (the message says why, with the
 * numbers); 2 on any other error.
 */
#define _GNU_SOURCE
#include <rtmgr.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *io_name(RtmgrIoClass c)
{
    switch (c) {
    case RTMGR_IO_RT:
        return "rt";
    case RTMGR_IO_BE:
        return "be";
    default:
        return "unchanged";
    }
}

int main(int argc, char **argv)
{
    RtmgrReserveRequest req;
    rtmgr_reserve_request_init(&req, 10000000ull /* P = 10 ms */, 1000000ull /* W = 1 ms */);
    req.memlock_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 4194304ull;
    const char *io = argc > 2 ? argv[2] : "rt";
    req.io_class = strcmp(io, "rt") == 0 ? RTMGR_IO_RT
                   : strcmp(io, "be") == 0 ? RTMGR_IO_BE
                                           : RTMGR_IO_DEFAULT;
    if (argc > 3) {
        req.cache_share = strtod(argv[3], NULL);
    }

    RtmgrReservation g;
    RtmgrGrantedResources res;
    RtmgrReserveStatus st = rtmgr_reserve_with(&req, &g, &res);
    switch (st) {
    case RTMGR_RESERVE_OK:
        break;
    case RTMGR_RESERVE_ENODAEMON:
        printf("reserve_resources: no rtmgr daemon runs, so nothing was reserved: %s\n",
               rtmgr_reserve_last_error());
        return 0;
    case RTMGR_RESERVE_REFUSED:
        printf("reserve_resources: the daemon refused: %s\n", rtmgr_reserve_last_error());
        return 1;
    default:
        fprintf(stderr, "reserve_resources: rtmgr_reserve_with failed (%d): %s\n", (int)st,
                rtmgr_reserve_last_error());
        return 2;
    }

    printf("reservation %llu on CPU %u: %s; locked memory %llu bytes; I/O class %s level %d; "
           "cache %s\n",
           (unsigned long long)g.id, g.cpu, g.hard ? "SCHED_DEADLINE" : "SCHED_FIFO",
           (unsigned long long)res.memlock_bytes, io_name(res.io_class), res.io_level,
           res.cache_partitioned ? "in the RT ways" : "not partitioned here");

    /* The grant raised RLIMIT_MEMLOCK to what was reserved: lock that much. */
    int rc = 0;
    if (res.memlock_bytes > 0) {
        void *buf = malloc(res.memlock_bytes);
        if (buf == NULL || mlock(buf, res.memlock_bytes) != 0) {
            perror("reserve_resources: mlock of the reserved memory");
            rc = 2;
        } else {
            memset(buf, 1, res.memlock_bytes);
            printf("locked %llu bytes\n", (unsigned long long)res.memlock_bytes);
            munlock(buf, res.memlock_bytes);
        }
        free(buf);
    }

    st = rtmgr_release(g.id);
    if (st != RTMGR_RESERVE_OK) {
        fprintf(stderr, "reserve_resources: rtmgr_release failed (%d): %s\n", (int)st,
                rtmgr_reserve_last_error());
        return 2;
    }
    printf("released reservation %llu\n", (unsigned long long)g.id);
    return rc;
}
