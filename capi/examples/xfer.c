/*
 * xfer: vqp's C API between two processes. The server listens; the client connects
 * over TCP (the card exchange) or, with --rdma-cm, through the RDMA connection
 * manager; both over one virtual QP of 4 data QPs in SPRAY mode.
 *
 *   server: the server SENDs its buffer's address and rkey to the client;
 *   client: one RDMA_WRITE_WITH_IMM of the whole buffer (cut into fragments over
 *           the 4 QPs), then an RDMA_READ of it back, checked byte for byte;
 *   server: its notification receive completes with the immediate; it checks every
 *           byte, then SENDs the client a one-byte verdict.
 *
 * usage: xfer [--rdma-cm] server [BIND_ADDR:PORT] [DEVICE]   (default 0.0.0.0:18515 soft1)
 *        xfer [--rdma-cm] client  HOST:PORT       [DEVICE]   (default soft0)
 * The verbs library is libibverbs.so.1, or VQP_IBVERBS_PATH (softverbs' cdylib);
 * librdmacm (--rdma-cm, whose addresses are IP addresses) is librdmacm.so.1, or
 * VQP_RDMACM_PATH (vqp-rdmacm's cdylib on softverbs).
 * Exit status 0 and the line "xfer: N bytes verified" on success.
 *
 * Build against an installed prefix:
 *   cc -std=c99 -o xfer xfer.c $(pkg-config --cflags --libs vqp)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vqp.h>

#define LEN (1u << 20)
#define IMM 0x12345678u

/* Prints the failed call, its status and the library's message, and exits 1. */
static void check(vqp_status st, const char *what) {
    if (st != VQP_OK) {
        char msg[256];
        vqp_last_error_message(msg, sizeof msg);
        fprintf(stderr, "xfer: %s: %s (%s)\n", what, vqp_status_str(st), msg);
        exit(1);
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Completions seen so far, by wr_id (the example uses ids below 16). */
static struct vqp_wc seen[16];
static int have[16];

/* Polls until the completion of wr_id has arrived; every completion must succeed. */
static struct vqp_wc wait_for(vqp_endpoint ep, uint64_t wr_id) {
    double until = now() + 10.0;
    struct vqp_wc wc[8];
    while (!have[wr_id]) {
        uint32_t n = 0;
        check(vqp_poll(ep, wc, 8, &n), "vqp_poll");
        for (uint32_t i = 0; i < n; i++) {
            if (wc[i].status != VQP_WC_SUCCESS || wc[i].wr_id >= 16) {
                fprintf(stderr, "xfer: request %llu failed with status %u\n",
                        (unsigned long long)wc[i].wr_id, wc[i].status);
                exit(1);
            }
            seen[wc[i].wr_id] = wc[i];
            have[wc[i].wr_id] = 1;
        }
        if (now() > until) {
            fprintf(stderr, "xfer: no completion for request %llu within 10 s\n",
                    (unsigned long long)wr_id);
            exit(1);
        }
    }
    return seen[wr_id];
}

/* What the server tells the client: where to write. */
struct target {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
};

static uint8_t pattern(size_t i) { return (uint8_t)(i * 7 + 3); }

int main(int argc, char **argv) {
    int cm = argc > 1 && !strcmp(argv[1], "--rdma-cm");
    argc -= cm;
    argv += cm;
    if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
        (!strcmp(argv[1], "client") && argc < 3)) {
        fprintf(stderr, "usage: xfer [--rdma-cm] server [ADDR:PORT] [DEVICE] | "
                        "xfer [--rdma-cm] client HOST:PORT [DEVICE]\n");
        return 2;
    }
    int server = !strcmp(argv[1], "server");
    const char *addr = argc > 2 ? argv[2] : "0.0.0.0:18515";
    const char *name = argc > 3 ? argv[3] : (server ? "soft1" : "soft0");
    /* The same major version, and a minor one at least the header's (the library has
     * every call the program was built with). */
    if (vqp_version() / 10000 != VQP_VERSION_MAJOR || vqp_version() < VQP_VERSION) {
        fprintf(stderr, "xfer: built for vqp %d.%d, running on %s\n", VQP_VERSION_MAJOR,
                VQP_VERSION_MINOR, vqp_version_string());
        return 1;
    }

    vqp_device dev;
    check(vqp_device_open(NULL, name, &dev), "vqp_device_open");
    uint8_t *buf = calloc(LEN, 1), *back = calloc(LEN, 1);
    struct target *ctl = calloc(1, sizeof *ctl);
    if (!buf || !back || !ctl) {
        fprintf(stderr, "xfer: out of memory\n");
        return 1;
    }
    uint32_t all = VQP_ACCESS_LOCAL_WRITE | VQP_ACCESS_REMOTE_WRITE | VQP_ACCESS_REMOTE_READ;
    vqp_mr mr, back_mr, ctl_mr;
    check(vqp_mr_register(dev, buf, LEN, all, &mr), "vqp_mr_register");
    check(vqp_mr_register(dev, back, LEN, VQP_ACCESS_LOCAL_WRITE, &back_mr), "vqp_mr_register");
    check(vqp_mr_register(dev, (uint8_t *)ctl, sizeof *ctl, VQP_ACCESS_LOCAL_WRITE, &ctl_mr),
          "vqp_mr_register");
    struct vqp_mr_info mi, bi, ci;
    check(vqp_mr_query(mr, &mi), "vqp_mr_query");
    check(vqp_mr_query(back_mr, &bi), "vqp_mr_query");
    check(vqp_mr_query(ctl_mr, &ci), "vqp_mr_query");

    struct vqp_settings s;
    check(vqp_settings_init(&s, sizeof s), "vqp_settings_init");
    s.mode = VQP_MODE_SPRAY; /* carries the user's immediate, and SEND */
    s.data_qps = 4;
    vqp_endpoint ep;
    check(vqp_endpoint_create(&dev, 1, &s, &ep), "vqp_endpoint_create");
    if (server) {
        printf("xfer: serving on %s%s\n", addr, cm ? " (RDMA-CM)" : "");
        fflush(stdout);
        if (cm)
            check(vqp_endpoint_cm_serve(ep, addr, 30000), "vqp_endpoint_cm_serve");
        else
            check(vqp_endpoint_serve(ep, addr, 30000), "vqp_endpoint_serve");
    } else if (cm) {
        check(vqp_endpoint_cm_dial(ep, addr, 30000), "vqp_endpoint_cm_dial");
    } else {
        check(vqp_endpoint_dial(ep, addr, 30000), "vqp_endpoint_dial");
    }

    int ok = 1;
    if (server) {
        struct vqp_recv_wr note = {.wr_id = 1, .len = 0};
        check(vqp_post_recv(ep, &note), "vqp_post_recv");
        struct target t = {mi.addr, mi.rkey, LEN};
        struct vqp_send_wr tell = {.wr_id = 2, .opcode = VQP_WR_SEND, .flags = VQP_SEND_SIGNALED,
                                   .key_mask = 1};
        memcpy(ctl, &t, sizeof t);
        tell.local_addr = ci.addr;
        tell.len = sizeof t;
        tell.keys[0].lkey = ci.lkey;
        check(vqp_post_send(ep, &tell), "vqp_post_send SEND");
        wait_for(ep, 2);
        struct vqp_wc wc = wait_for(ep, 1);
        /* SPRAY's notification is a zero-byte write: it carries the immediate. */
        if (!(wc.flags & VQP_WC_WITH_IMM) || wc.imm_data != IMM) {
            fprintf(stderr, "xfer: the notification lacks the immediate\n");
            ok = 0;
        }
        for (size_t i = 0; i < LEN; i++)
            if (buf[i] != pattern(i)) {
                fprintf(stderr, "xfer: byte %zu is %u, expected %u\n", i, buf[i], pattern(i));
                ok = 0;
                break;
            }
        /* The verdict: one byte, sent from the control buffer. */
        ((uint8_t *)ctl)[0] = (uint8_t)ok;
        struct vqp_send_wr v = tell;
        v.wr_id = 3;
        v.len = 1;
        check(vqp_post_send(ep, &v), "vqp_post_send verdict");
        wait_for(ep, 3);
    } else {
        struct vqp_recv_wr rx = {.wr_id = 1, .addr = ci.addr, .len = sizeof *ctl, .lkey = ci.lkey};
        check(vqp_post_recv(ep, &rx), "vqp_post_recv");
        wait_for(ep, 1);
        struct target t;
        memcpy(&t, ctl, sizeof t);
        if (t.len != LEN) {
            fprintf(stderr, "xfer: the server offers %u bytes, expected %u\n", t.len, LEN);
            return 1;
        }
        for (size_t i = 0; i < LEN; i++)
            buf[i] = pattern(i);
        /* Post the verdict's receive before the write whose arrival makes it come. */
        struct vqp_recv_wr vrx = {.wr_id = 4, .addr = ci.addr, .len = 1, .lkey = ci.lkey};
        check(vqp_post_recv(ep, &vrx), "vqp_post_recv verdict");
        struct vqp_send_wr w = {.wr_id = 2, .opcode = VQP_WR_RDMA_WRITE_WITH_IMM,
                                .flags = VQP_SEND_SIGNALED, .local_addr = mi.addr, .len = LEN,
                                .remote_addr = t.addr, .imm_data = IMM, .key_mask = 1};
        w.keys[0].lkey = mi.lkey;
        w.keys[0].rkey = t.rkey;
        check(vqp_post_send(ep, &w), "vqp_post_send RDMA_WRITE_WITH_IMM");
        struct vqp_send_wr r = w;
        r.wr_id = 3;
        r.opcode = VQP_WR_RDMA_READ;
        r.local_addr = bi.addr;
        r.imm_data = 0;
        r.keys[0].lkey = bi.lkey;
        check(vqp_post_send(ep, &r), "vqp_post_send RDMA_READ");
        wait_for(ep, 3);
        if (memcmp(back, buf, LEN) != 0) {
            fprintf(stderr, "xfer: the bytes read back differ from those written\n");
            ok = 0;
        }
        wait_for(ep, 4);
        if (((uint8_t *)ctl)[0] != 1) {
            fprintf(stderr, "xfer: the server found the data wrong\n");
            ok = 0;
        }
    }

    struct vqp_qp_stats st;
    uint64_t wqes = 0;
    for (uint32_t i = 0; i < s.data_qps; i++) {
        check(vqp_endpoint_qp_stats(ep, i, &st), "vqp_endpoint_qp_stats");
        wqes += st.wqes;
    }
    check(vqp_endpoint_destroy(ep), "vqp_endpoint_destroy");
    check(vqp_mr_deregister(ctl_mr), "vqp_mr_deregister");
    check(vqp_mr_deregister(back_mr), "vqp_mr_deregister");
    check(vqp_mr_deregister(mr), "vqp_mr_deregister");
    check(vqp_device_close(dev), "vqp_device_close");
    free(ctl);
    free(back);
    free(buf);
    if (!ok)
        return 1;
    printf("xfer %s%s: %u bytes verified (%llu send WQEs)\n", server ? "server" : "client",
           cm ? " (RDMA-CM)" : "", LEN, (unsigned long long)wqes);
    return 0;
}
