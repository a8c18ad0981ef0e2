// vqp.hpp: a header-only C++17 wrapper over vqp.h.
//
// RAII owners for the handles (vqp::device, vqp::memory_region, vqp::endpoint,
// vqp::app),
// move-only, each destroying its handle once; a small vqp::span for buffers and
// arrays (C++17 has no std::span).
//
// Errors. Set-up calls throw vqp::error (a std::runtime_error carrying the vqp_status
// and the library's message): a failed open, register, create or connect leaves
// nothing usable, and constructors can only report that by throwing. The data path
// does not throw for what is expected there: post_send / post_send_inline /
// post_recv return a [[nodiscard]] vqp::status, because VQP_ERR_FULL (backpressure)
// is routine in a posting loop and an exception per full queue would cost far more
// than the post; poll returns the count and throws only when the provider's poll
// failed, which is not routine. Every data-path member is one inline call of the C
// function with the caller's struct or array: no copy, no allocation.
#ifndef VQP_HPP
#define VQP_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "vqp.h"

namespace vqp {

// A status code; VQP_OK (0) is success.
class [[nodiscard]] status {
public:
    constexpr status(vqp_status code) noexcept : code_(code) {}
    constexpr bool ok() const noexcept { return code_ == VQP_OK; }
    constexpr explicit operator bool() const noexcept { return ok(); }
    constexpr vqp_status code() const noexcept { return code_; }
    // Backpressure: poll, then post again.
    constexpr bool full() const noexcept { return code_ == VQP_ERR_FULL; }
    const char *name() const noexcept { return vqp_status_str(code_); }

private:
    vqp_status code_;
};

// The last failure's message on this thread.
inline std::string last_error_message() {
    std::size_t n = vqp_last_error_message(nullptr, 0);
    std::string s(n + 1, '\0');
    vqp_last_error_message(&s[0], s.size());
    s.resize(n);
    return s;
}

// A failed set-up call: its status and the library's message.
class error : public std::runtime_error {
public:
    error(const char *what, vqp_status code)
        : std::runtime_error(std::string(what) + ": " + vqp_status_str(code) + " (" +
                             last_error_message() + ")"),
          code_(code) {}
    vqp_status code() const noexcept { return code_; }

private:
    vqp_status code_;
};

// Throws vqp::error unless `st` is VQP_OK.
inline void check(vqp_status st, const char *what) {
    if (st != VQP_OK)
        throw error(what, st);
}

// A view of `size()` contiguous T: an array, a std::array, a std::vector, or a
// pointer and a count.
template <class T> class span {
public:
    constexpr span() noexcept = default;
    constexpr span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    template <std::size_t N> constexpr span(T (&a)[N]) noexcept : data_(a), size_(N) {}
    template <class U, std::size_t N>
    constexpr span(std::array<U, N> &a) noexcept : data_(a.data()), size_(N) {}
    template <class U, std::size_t N>
    constexpr span(const std::array<U, N> &a) noexcept : data_(a.data()), size_(N) {}
    template <class U, class A>
    span(std::vector<U, A> &v) noexcept : data_(v.data()), size_(v.size()) {}
    template <class U, class A>
    span(const std::vector<U, A> &v) noexcept : data_(v.data()), size_(v.size()) {}
    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }
    constexpr T &operator[](std::size_t i) const noexcept { return data_[i]; }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

// An open device and its protection domain.
class device {
public:
    // Opens `name` (nullptr: the first device) of `library` (nullptr: VQP_IBVERBS_PATH
    // or libibverbs.so.1).
    explicit device(const char *name, const char *library = nullptr) {
        check(vqp_device_open(library, name, &h_), "vqp_device_open");
    }
    device(device &&o) noexcept : h_(std::exchange(o.h_, vqp_device{})) {}
    device &operator=(device &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, vqp_device{});
        }
        return *this;
    }
    device(const device &) = delete;
    device &operator=(const device &) = delete;
    ~device() { reset(); }

    vqp_device handle() const noexcept { return h_; }
    std::string name() const {
        char buf[64];
        check(vqp_device_name(h_, buf, sizeof buf), "vqp_device_name");
        return buf;
    }

private:
    void reset() noexcept {
        if (h_.handle)
            (void)vqp_device_close(h_);
        h_ = vqp_device{};
    }
    vqp_device h_{};
};

// The caller's memory registered on a device; the memory must outlive it.
class memory_region {
public:
    memory_region(const device &dev, span<std::uint8_t> mem, std::uint32_t access) {
        check(vqp_mr_register(dev.handle(), mem.data(), mem.size(), access, &h_),
              "vqp_mr_register");
        check(vqp_mr_query(h_, &info_), "vqp_mr_query");
    }
    memory_region(memory_region &&o) noexcept
        : h_(std::exchange(o.h_, vqp_mr{})), info_(o.info_) {}
    memory_region &operator=(memory_region &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, vqp_mr{});
            info_ = o.info_;
        }
        return *this;
    }
    memory_region(const memory_region &) = delete;
    memory_region &operator=(const memory_region &) = delete;
    ~memory_region() { reset(); }

    vqp_mr handle() const noexcept { return h_; }
    std::uint64_t addr() const noexcept { return info_.addr; }
    std::uint64_t length() const noexcept { return info_.len; }
    std::uint32_t lkey() const noexcept { return info_.lkey; }
    std::uint32_t rkey() const noexcept { return info_.rkey; }

private:
    void reset() noexcept {
        if (h_.handle)
            (void)vqp_mr_deregister(h_);
        h_ = vqp_mr{};
    }
    vqp_mr h_{};
    vqp_mr_info info_{};
};

// vqp_settings with the library's defaults filled in.
struct settings : vqp_settings {
    settings() : vqp_settings{} { check(vqp_settings_init(this, sizeof(vqp_settings)), "vqp_settings_init"); }
};

// One side of a virtual QP.
class endpoint {
public:
    endpoint(const device &dev, const vqp_settings &s) {
        vqp_device d = dev.handle();
        check(vqp_endpoint_create(&d, 1, &s, &h_), "vqp_endpoint_create");
    }
    // Over several devices: data QP i on devices[i % devices.size()].
    endpoint(span<const vqp_device> devices, const vqp_settings &s) {
        check(vqp_endpoint_create(devices.data(), devices.size(), &s, &h_),
              "vqp_endpoint_create");
    }
    endpoint(endpoint &&o) noexcept : h_(std::exchange(o.h_, vqp_endpoint{})) {}
    endpoint &operator=(endpoint &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, vqp_endpoint{});
        }
        return *this;
    }
    endpoint(const endpoint &) = delete;
    endpoint &operator=(const endpoint &) = delete;
    ~endpoint() { reset(); }

    vqp_endpoint handle() const noexcept { return h_; }

    // This side's card, for the peer.
    std::vector<std::uint8_t> card() const {
        std::vector<std::uint8_t> c(VQP_CARD_MAX);
        std::size_t n = 0;
        check(vqp_endpoint_card(h_, c.data(), c.size(), &n), "vqp_endpoint_card");
        c.resize(n);
        return c;
    }
    void connect(span<const std::uint8_t> peer_card) {
        check(vqp_endpoint_connect(h_, peer_card.data(), peer_card.size()),
              "vqp_endpoint_connect");
    }
    // TCP set-up: serve on `bind_addr` or dial `addr`; timeout 0 is 10 s.
    void serve(const char *bind_addr, std::uint32_t timeout_ms = 0) {
        check(vqp_endpoint_serve(h_, bind_addr, timeout_ms), "vqp_endpoint_serve");
    }
    void dial(const char *addr, std::uint32_t timeout_ms = 0) {
        check(vqp_endpoint_dial(h_, addr, timeout_ms), "vqp_endpoint_dial");
    }
    // RDMA-CM set-up: listen on `bind_addr` ("IP:port") and accept one client, or
    // connect to the server at `addr` ("IP:port"); timeout 0 is 10 s. librdmacm is
    // VQP_RDMACM_PATH or librdmacm.so.1.
    void cm_serve(const char *bind_addr, std::uint32_t timeout_ms = 0) {
        check(vqp_endpoint_cm_serve(h_, bind_addr, timeout_ms), "vqp_endpoint_cm_serve");
    }
    void cm_dial(const char *addr, std::uint32_t timeout_ms = 0) {
        check(vqp_endpoint_cm_dial(h_, addr, timeout_ms), "vqp_endpoint_cm_dial");
    }

    // The data path: one C call each.
    status post_send(const vqp_send_wr &wr) noexcept { return vqp_post_send(h_, &wr); }
    status post_send_inline(const vqp_send_wr &wr, span<const std::uint8_t> payload) noexcept {
        return vqp_post_send_inline(h_, &wr, payload.data(), payload.size());
    }
    status post_recv(const vqp_recv_wr &wr) noexcept { return vqp_post_recv(h_, &wr); }
    // Polls once into `out`; returns how many completions were written.
    std::uint32_t poll(span<vqp_wc> out) {
        std::uint32_t n = 0;
        vqp_status st = vqp_poll(h_, out.data(), static_cast<std::uint32_t>(out.size()), &n);
        if (st != VQP_OK)
            throw error("vqp_poll", st);
        return n;
    }

    vqp_qp_stats qp_stats(std::uint32_t qp) const {
        vqp_qp_stats s{};
        check(vqp_endpoint_qp_stats(h_, qp, &s), "vqp_endpoint_qp_stats");
        return s;
    }

    // Failures and recovery (see vqp.h).
    vqp_failover failover() const {
        vqp_failover f{};
        check(vqp_endpoint_failover(h_, &f), "vqp_endpoint_failover");
        return f;
    }
    // Applies an asynchronous event of device `device`; true when it failed a QP here.
    bool apply_event(std::uint32_t device, const vqp_async_event &ev) {
        int failed = 0;
        check(vqp_endpoint_apply_event(h_, device, &ev, &failed), "vqp_endpoint_apply_event");
        return failed != 0;
    }
    // Fail-back: the Offer for data QP `qp`, and what to answer a peer's message.
    std::array<std::uint8_t, VQP_FAILBACK_LEN> offer_rejoin(std::uint32_t qp) {
        std::array<std::uint8_t, VQP_FAILBACK_LEN> m{};
        check(vqp_endpoint_offer_rejoin(h_, qp, m.data()), "vqp_endpoint_offer_rejoin");
        return m;
    }
    // Returns true and fills `reply` when the message calls for an answer.
    bool on_failback(const std::array<std::uint8_t, VQP_FAILBACK_LEN> &msg,
                     std::array<std::uint8_t, VQP_FAILBACK_LEN> &reply) {
        int has = 0;
        check(vqp_endpoint_on_failback(h_, msg.data(), reply.data(), &has),
              "vqp_endpoint_on_failback");
        return has != 0;
    }

private:
    void reset() noexcept {
        if (h_.handle)
            (void)vqp_endpoint_destroy(h_);
        h_ = vqp_endpoint{};
    }
    vqp_endpoint h_{};
};

// vqp_poller_config with the library's defaults filled in.
struct poller_config : vqp_poller_config {
    poller_config() : vqp_poller_config{} {
        check(vqp_poller_config_init(this, sizeof(vqp_poller_config)), "vqp_poller_config_init");
    }
};

// A poll thread serving a connected endpoint, and the application's side of its
// rings. Destroying it drains the thread (up to one second, then aborts).
class app {
public:
    // Hands `ep` (connected) to a new poll thread; `ep` takes no data-path call after.
    app(endpoint &ep, const vqp_poller_config &c) {
        check(vqp_endpoint_start_poller(ep.handle(), &c, &h_), "vqp_endpoint_start_poller");
    }
    app(app &&o) noexcept : h_(std::exchange(o.h_, vqp_app{})) {}
    app &operator=(app &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, vqp_app{});
        }
        return *this;
    }
    app(const app &) = delete;
    app &operator=(const app &) = delete;
    ~app() { reset(); }

    vqp_app handle() const noexcept { return h_; }
    // VQP_ERR_FULL: the ring is full; take events and retry.
    status send(const vqp_send_wr &wr) noexcept { return vqp_app_send(h_, &wr); }
    status recv(const vqp_recv_wr &wr) noexcept { return vqp_app_recv(h_, &wr); }
    std::uint32_t poll(span<vqp_event> out) {
        std::uint32_t n = 0;
        vqp_status st = vqp_app_poll(h_, out.data(), static_cast<std::uint32_t>(out.size()), &n);
        if (st != VQP_OK)
            throw error("vqp_app_poll", st);
        return n;
    }
    // Stops the thread (drain within `timeout_ms`, or abort) and returns what it did.
    vqp_poller_stats stop(std::uint32_t timeout_ms, bool abort = false) {
        vqp_poller_stats s{};
        vqp_status st = vqp_app_stop(h_, timeout_ms, abort ? 1 : 0, &s);
        h_ = vqp_app{};
        check(st, "vqp_app_stop");
        return s;
    }

private:
    void reset() noexcept {
        if (h_.handle)
            (void)vqp_app_stop(h_, 1000, 0, nullptr);
        h_ = vqp_app{};
    }
    vqp_app h_{};
};

} // namespace vqp

#endif // VQP_HPP
