// xfer.cpp: the C example's exchange (xfer.c) through the C++ wrapper vqp.hpp.
//
//   server: SENDs its buffer's address and rkey; its notification receive completes
//           with the immediate once the client's write landed; checks every byte and
//           SENDs a one-byte verdict.
//   client: one RDMA_WRITE_WITH_IMM of 1 MiB over 4 data QPs (SPRAY), an RDMA_READ
//           of it back, checked byte for byte; then the server's verdict.
//
// usage: xfer [--rdma-cm] server [ADDR:PORT] [DEVICE] | xfer [--rdma-cm] client HOST:PORT [DEVICE]
// (--rdma-cm: connected through the RDMA connection manager, as in xfer.c)
// Build: c++ -std=c++17 -o xfer_cpp xfer.cpp $(pkg-config --cflags --libs vqp)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include <vqp.hpp>

namespace {

constexpr std::uint32_t LEN = 1u << 20;
constexpr std::uint32_t IMM = 0x12345678u;

struct target {
    std::uint64_t addr;
    std::uint32_t rkey;
    std::uint32_t len;
};

std::uint8_t pattern(std::size_t i) { return static_cast<std::uint8_t>(i * 7 + 3); }

// Completions by wr_id, polled until the one asked for has come.
class waiter {
public:
    explicit waiter(vqp::endpoint &ep) : ep_(ep) {}
    vqp_wc wait_for(std::uint64_t wr_id) {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        vqp_wc wc[8];
        while (seen_.find(wr_id) == seen_.end()) {
            std::uint32_t n = ep_.poll(wc);
            for (std::uint32_t i = 0; i < n; i++) {
                if (wc[i].status != VQP_WC_SUCCESS)
                    throw std::runtime_error("request " + std::to_string(wc[i].wr_id) +
                                             " failed with status " + std::to_string(wc[i].status));
                seen_[wc[i].wr_id] = wc[i];
            }
            if (std::chrono::steady_clock::now() > until)
                throw std::runtime_error("no completion for request " + std::to_string(wr_id));
        }
        return seen_[wr_id];
    }

private:
    vqp::endpoint &ep_;
    std::map<std::uint64_t, vqp_wc> seen_;
};

void post(vqp::status st, const char *what) {
    if (!st)
        throw vqp::error(what, st.code());
}

int run(bool server, bool cm, const char *addr, const char *name) {
    vqp::device dev(name);
    std::vector<std::uint8_t> buf(LEN), back(LEN), ctl(sizeof(target));
    const std::uint32_t all =
        VQP_ACCESS_LOCAL_WRITE | VQP_ACCESS_REMOTE_WRITE | VQP_ACCESS_REMOTE_READ;
    vqp::memory_region mr(dev, buf, all), back_mr(dev, back, VQP_ACCESS_LOCAL_WRITE),
        ctl_mr(dev, ctl, VQP_ACCESS_LOCAL_WRITE);

    vqp::settings s;
    s.mode = VQP_MODE_SPRAY;
    s.data_qps = 4;
    vqp::endpoint ep(dev, s);
    if (server) {
        std::printf("xfer: serving on %s%s\n", addr, cm ? " (RDMA-CM)" : "");
        std::fflush(stdout);
        if (cm)
            ep.cm_serve(addr, 30000);
        else
            ep.serve(addr, 30000);
    } else if (cm) {
        ep.cm_dial(addr, 30000);
    } else {
        ep.dial(addr, 30000);
    }
    waiter w(ep);
    bool ok = true;
    if (server) {
        post(ep.post_recv(vqp_recv_wr{1, 0, 0, 0}), "post_recv");
        target t{mr.addr(), mr.rkey(), LEN};
        std::memcpy(ctl.data(), &t, sizeof t);
        vqp_send_wr tell{};
        tell.wr_id = 2;
        tell.opcode = VQP_WR_SEND;
        tell.flags = VQP_SEND_SIGNALED;
        tell.local_addr = ctl_mr.addr();
        tell.len = sizeof t;
        tell.key_mask = 1;
        tell.keys[0].lkey = ctl_mr.lkey();
        post(ep.post_send(tell), "post_send SEND");
        w.wait_for(2);
        vqp_wc note = w.wait_for(1);
        if (!(note.flags & VQP_WC_WITH_IMM) || note.imm_data != IMM) {
            std::fprintf(stderr, "xfer: the notification lacks the immediate\n");
            ok = false;
        }
        for (std::size_t i = 0; i < LEN && ok; i++)
            if (buf[i] != pattern(i)) {
                std::fprintf(stderr, "xfer: byte %zu is %u\n", i, buf[i]);
                ok = false;
            }
        ctl[0] = ok ? 1 : 0;
        vqp_send_wr v = tell;
        v.wr_id = 3;
        v.len = 1;
        post(ep.post_send(v), "post_send verdict");
        w.wait_for(3);
    } else {
        post(ep.post_recv(vqp_recv_wr{1, ctl_mr.addr(), sizeof(target), ctl_mr.lkey()}),
             "post_recv");
        w.wait_for(1);
        target t;
        std::memcpy(&t, ctl.data(), sizeof t);
        if (t.len != LEN)
            throw std::runtime_error("the server offers another length");
        for (std::size_t i = 0; i < LEN; i++)
            buf[i] = pattern(i);
        post(ep.post_recv(vqp_recv_wr{4, ctl_mr.addr(), 1, ctl_mr.lkey()}), "post_recv");
        vqp_send_wr wr{};
        wr.wr_id = 2;
        wr.opcode = VQP_WR_RDMA_WRITE_WITH_IMM;
        wr.flags = VQP_SEND_SIGNALED;
        wr.local_addr = mr.addr();
        wr.len = LEN;
        wr.remote_addr = t.addr;
        wr.imm_data = IMM;
        wr.key_mask = 1;
        wr.keys[0] = vqp_keys{mr.lkey(), t.rkey};
        post(ep.post_send(wr), "post_send RDMA_WRITE_WITH_IMM");
        vqp_send_wr rd = wr;
        rd.wr_id = 3;
        rd.opcode = VQP_WR_RDMA_READ;
        rd.local_addr = back_mr.addr();
        rd.imm_data = 0;
        rd.keys[0].lkey = back_mr.lkey();
        post(ep.post_send(rd), "post_send RDMA_READ");
        w.wait_for(3);
        if (back != buf) {
            std::fprintf(stderr, "xfer: the bytes read back differ\n");
            ok = false;
        }
        w.wait_for(4);
        if (ctl[0] != 1) {
            std::fprintf(stderr, "xfer: the server found the data wrong\n");
            ok = false;
        }
    }
    std::uint64_t wqes = 0;
    for (std::uint32_t i = 0; i < s.data_qps; i++)
        wqes += ep.qp_stats(i).wqes;
    if (!ok)
        return 1;
    std::printf("xfer %s (C++%s): %u bytes verified (%llu send WQEs)\n",
                server ? "server" : "client", cm ? ", RDMA-CM" : "", LEN,
                static_cast<unsigned long long>(wqes));
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    bool cm = argc > 1 && !std::strcmp(argv[1], "--rdma-cm");
    argc -= cm;
    argv += cm;
    if (argc < 2 || (std::strcmp(argv[1], "server") && std::strcmp(argv[1], "client")) ||
        (!std::strcmp(argv[1], "client") && argc < 3)) {
        std::fprintf(stderr, "usage: xfer [--rdma-cm] server [ADDR:PORT] [DEVICE] | "
                             "xfer [--rdma-cm] client HOST:PORT [DEVICE]\n");
        return 2;
    }
    // The same major version, and the library has every call this was built with.
    if (vqp_version() / 10000 != VQP_VERSION_MAJOR || vqp_version() < VQP_VERSION) {
        std::fprintf(stderr, "xfer: built for vqp %d.%d, running on %s\n", VQP_VERSION_MAJOR,
                     VQP_VERSION_MINOR, vqp_version_string());
        return 1;
    }
    bool server = !std::strcmp(argv[1], "server");
    const char *addr = argc > 2 ? argv[2] : "0.0.0.0:18515";
    const char *name = argc > 3 ? argv[3] : (server ? "soft1" : "soft0");
    try {
        return run(server, cm, addr, name);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "xfer: %s\n", e.what());
        return 1;
    }
}
