//! Proves that softverbs' UCP declarations (`vqp_softverbs::ucx::sys`) match the
//! installed `<ucp/api/ucp.h>`: a C program generated from the lists below prints the
//! header's sizes, alignments, field offsets and sizes and constant values, which are
//! compared with Rust's; and every function of the `Ucp` table is assigned, in the same
//! program, to a pointer of the C type spelled from its Rust declaration, so that the
//! compiler (`-Werror`) refuses any difference in arguments or result.
//!
//! Skipped where the header or the compiler is missing, naming the package
//! (`libucx-dev`); CI installs it and makes a skip a failure.

mod system;

use std::fmt::Write as _;
use std::mem::{align_of, size_of, MaybeUninit};
use std::process::{Command, Stdio};

use vqp_softverbs::ucx::sys;

const PACKAGE: &str = "libucx-dev";

struct Layout {
    c_type: &'static str,
    size: usize,
    align: usize,
    fields: Vec<(&'static str, usize, usize)>,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! layouts {
    ($( $name:ident { $($field:ident),* $(,)? } )*) => {
        fn rust_layouts() -> Vec<Layout> {
            let mut out = Vec::new();
            $(
                let base = MaybeUninit::<sys::$name>::uninit();
                let base = base.as_ptr();
                #[allow(unused_mut)]
                let mut fields = Vec::new();
                $(
                    // SAFETY: only the member's address is taken, inside `base`'s
                    // allocation; nothing is read.
                    let f = unsafe { std::ptr::addr_of!((*base).$field) };
                    fields.push((stringify!($field), f as usize - base as usize, size_of_pointee(f)));
                )*
                out.push(Layout {
                    c_type: stringify!($name),
                    size: size_of::<sys::$name>(),
                    align: align_of::<sys::$name>(),
                    fields,
                });
            )*
            out
        }
    };
}

layouts! {
    ucp_params_t {
        field_mask, features, request_size, request_init, request_cleanup, tag_sender_mask,
        mt_workers_shared, estimated_num_eps, estimated_num_ppn, name,
    }
    ucs_cpu_set_t { ucs_bits }
    ucp_worker_params_t {
        field_mask, thread_mode, cpu_mask, events, user_data, event_fd, flags, name,
        am_alignment, client_id,
    }
    ucs_sock_addr_t { addr, addrlen }
    ucp_dt_iov_t { buffer, length }
    ucp_err_handler_t { cb, arg }
    ucp_listener_conn_handler_t { cb, arg }
    ucp_listener_params_t { field_mask, sockaddr, accept_handler, conn_handler }
    ucp_listener_attr_t { field_mask, sockaddr }
    ucp_conn_request_attr_t { field_mask, client_address, client_id }
    ucp_ep_params_t {
        field_mask, address, err_mode, err_handler, user_data, flags, sockaddr, conn_request,
        name, local_sockaddr,
    }
    ucp_request_param_t {
        op_attr_mask, flags, request, cb, datatype, user_data, reply_buffer, memory_type,
        recv_info, memh,
    }
    ucp_am_handler_param_t { field_mask, id, flags, cb, arg }
    ucp_am_recv_param_t { recv_attr, reply_ep }
}

/// The C spelling of a layout's type (a struct tag where the header has no typedef).
fn c_name(rust: &str) -> &str {
    match rust {
        "ucp_am_recv_param_t" => "struct ucp_am_recv_param",
        other => other,
    }
}

macro_rules! constants {
    ($($name:ident),* $(,)?) => {
        fn rust_constants() -> Vec<(&'static str, i64)> {
            vec![$((stringify!($name), sys::$name as i64)),*]
        }
    };
}

constants! {
    UCS_OK, UCS_INPROGRESS, UCS_ERR_NO_MESSAGE, UCS_ERR_NO_RESOURCE, UCS_ERR_IO_ERROR,
    UCS_ERR_NO_MEMORY, UCS_ERR_INVALID_PARAM, UCS_ERR_UNREACHABLE, UCS_ERR_INVALID_ADDR,
    UCS_ERR_MESSAGE_TRUNCATED, UCS_ERR_BUSY, UCS_ERR_CANCELED, UCS_ERR_TIMED_OUT,
    UCS_ERR_REJECTED, UCS_ERR_NOT_CONNECTED, UCS_ERR_CONNECTION_RESET,
    UCS_ERR_ENDPOINT_TIMEOUT, UCS_ERR_LAST,
    UCS_THREAD_MODE_SINGLE, UCS_THREAD_MODE_SERIALIZED, UCS_MEMORY_TYPE_HOST,
    UCP_API_MAJOR, UCP_API_MINOR,
    UCP_PARAM_FIELD_FEATURES, UCP_PARAM_FIELD_NAME, UCP_FEATURE_AM, UCP_FEATURE_WAKEUP,
    UCP_WORKER_PARAM_FIELD_THREAD_MODE,
    UCP_LISTENER_PARAM_FIELD_SOCK_ADDR, UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
    UCP_LISTENER_ATTR_FIELD_SOCKADDR, UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR,
    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE, UCP_EP_PARAM_FIELD_ERR_HANDLER,
    UCP_EP_PARAM_FIELD_SOCK_ADDR, UCP_EP_PARAM_FIELD_FLAGS, UCP_EP_PARAM_FIELD_CONN_REQUEST,
    UCP_EP_PARAMS_FLAGS_CLIENT_SERVER, UCP_ERR_HANDLING_MODE_PEER, UCP_EP_CLOSE_FLAG_FORCE,
    UCP_DATATYPE_CONTIG, UCP_DATATYPE_IOV, UCP_DATATYPE_SHIFT,
    UCP_AM_FLAG_WHOLE_MSG, UCP_AM_SEND_FLAG_REPLY, UCP_AM_RECV_ATTR_FIELD_REPLY_EP,
    UCP_AM_RECV_ATTR_FLAG_DATA, UCP_AM_RECV_ATTR_FLAG_RNDV,
    UCP_AM_HANDLER_PARAM_FIELD_ID, UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
    UCP_AM_HANDLER_PARAM_FIELD_CB, UCP_AM_HANDLER_PARAM_FIELD_ARG,
    UCP_OP_ATTR_FIELD_CALLBACK, UCP_OP_ATTR_FIELD_USER_DATA, UCP_OP_ATTR_FIELD_DATATYPE,
    UCP_OP_ATTR_FIELD_FLAGS,
}

/// A Rust type as `stringify!` wrote it (`* const c_char`, `* mut * mut ucp_config_t`,
/// `ucp_context_h`), spelled in C.
fn c_type(rust: &str) -> String {
    let t = rust.trim();
    if let Some(ptr) = t.strip_prefix('*') {
        let ptr = ptr.trim_start();
        if let Some(rest) = ptr.strip_prefix("const") {
            let inner = c_type(rest);
            return if inner.ends_with('*') {
                format!("{inner} const *")
            } else {
                format!("const {inner} *")
            };
        }
        if let Some(rest) = ptr.strip_prefix("mut") {
            return format!("{} *", c_type(rest));
        }
    }
    match t {
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned",
        "c_void" => "void",
        "usize" => "size_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        other => other,
    }
    .to_string()
}

/// `fn(A, B) -> R` as written by `stringify!`: (R in C, [A, B] in C).
fn c_signature(rust: &str) -> (String, Vec<String>) {
    let rust = rust.trim();
    let open = rust.find('(').expect("fn(");
    let close = rust.rfind(')').expect(")");
    let args: Vec<String> = rust[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(c_type)
        .collect();
    let ret = rust[close + 1..]
        .trim()
        .strip_prefix("->")
        .map_or_else(|| "void".to_string(), c_type);
    (ret, args)
}

fn probe_source() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdalign.h>\n\
         #include <ucp/api/ucp.h>\n\n\
         #define S(T) printf(\"S|%s|%zu|%zu\\n\", #T, sizeof(T), alignof(T))\n\
         #define F(T, f) printf(\"F|%s|%s|%zu|%zu\\n\", #T, #f, offsetof(T, f), sizeof(((T *)0)->f))\n\
         #define C(c) printf(\"C|%s|%lld\\n\", #c, (long long)(c))\n\n",
    );
    for (i, (name, rust)) in sys::FUNCTIONS.iter().enumerate() {
        let (ret, args) = c_signature(rust);
        let args = if args.is_empty() {
            "void".to_string()
        } else {
            args.join(", ")
        };
        writeln!(c, "{ret} (*fn_{i})({args}) = {name};").unwrap();
    }
    c.push_str("\nint main(void)\n{\n");
    for l in rust_layouts() {
        let t = c_name(l.c_type);
        writeln!(c, "\tS({t});").unwrap();
        for (f, _, _) in &l.fields {
            writeln!(c, "\tF({t}, {f});").unwrap();
        }
    }
    for (name, _) in rust_constants() {
        writeln!(c, "\tC({name});").unwrap();
    }
    writeln!(c, "\tC(ucp_dt_make_contig(1));").unwrap();
    writeln!(c, "\tC(sizeof(ucs_status_t));").unwrap();
    c.push_str("\treturn 0;\n}\n");
    c
}

#[test]
fn the_ucp_declarations_match_ucp_h() {
    let test = "the_ucp_declarations_match_ucp_h";
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vqp-ucx-h-probe");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, probe_source()).unwrap();
    let out = match Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lucp")
        .arg("-lucs")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            system::skip(
                test,
                "gcc",
                &format!("the C compiler {cc:?} does not run ({e})"),
            );
            return;
        }
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("ucp/api/ucp.h") || err.contains("-lucp") || err.contains("-lucs") {
            system::skip(
                test,
                PACKAGE,
                "<ucp/api/ucp.h> or libucp.so is not installed",
            );
            return;
        }
        panic!(
            "the probe does not compile against ucp.h (a declaration differs):\n{err}\n--- {}",
            src.display()
        );
    }
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "the probe failed");
    let text = String::from_utf8_lossy(&run.stdout);
    let mut c_sizes = std::collections::HashMap::new();
    let mut c_fields = std::collections::HashMap::new();
    let mut c_consts = std::collections::HashMap::new();
    for line in text.lines() {
        let p: Vec<&str> = line.split('|').collect();
        match p[0] {
            "S" => {
                c_sizes.insert(
                    p[1].to_string(),
                    (
                        p[2].parse::<usize>().unwrap(),
                        p[3].parse::<usize>().unwrap(),
                    ),
                );
            }
            "F" => {
                c_fields.insert(
                    (p[1].to_string(), p[2].to_string()),
                    (
                        p[3].parse::<usize>().unwrap(),
                        p[4].parse::<usize>().unwrap(),
                    ),
                );
            }
            "C" => {
                c_consts.insert(p[1].to_string(), p[2].parse::<i64>().unwrap());
            }
            _ => panic!("probe line {line:?}"),
        }
    }
    let mut wrong = Vec::new();
    for l in rust_layouts() {
        let t = c_name(l.c_type);
        if c_sizes[t] != (l.size, l.align) {
            wrong.push(format!(
                "{t}: C (size, align) {:?}, Rust {:?}",
                c_sizes[t],
                (l.size, l.align)
            ));
        }
        for (f, off, size) in l.fields {
            let c = c_fields[&(t.to_string(), f.to_string())];
            if c != (off, size) {
                wrong.push(format!(
                    "{t}.{f}: C (offset, size) {c:?}, Rust {:?}",
                    (off, size)
                ));
            }
        }
    }
    for (name, v) in rust_constants() {
        if c_consts[name] != v {
            wrong.push(format!("{name}: C {}, Rust {v}", c_consts[name]));
        }
    }
    if c_consts["ucp_dt_make_contig(1)"] != sys::UCP_DATATYPE_BYTES as i64 {
        wrong.push("UCP_DATATYPE_BYTES is not ucp_dt_make_contig(1)".into());
    }
    if c_consts["sizeof(ucs_status_t)"] != size_of::<sys::ucs_status_t>() as i64 {
        wrong.push("ucs_status_t's size".into());
    }
    assert!(
        wrong.is_empty(),
        "differences from ucp.h:\n{}",
        wrong.join("\n")
    );
    eprintln!(
        "{} structs, {} constants and {} functions agree with ucp.h",
        rust_layouts().len(),
        rust_constants().len(),
        sys::FUNCTIONS.len()
    );
}

#[test]
fn c_types_are_spelled_from_rust() {
    assert_eq!(c_type("* const c_char"), "const char *");
    assert_eq!(c_type("*mut c_void"), "void *");
    assert_eq!(c_type("* mut * mut ucp_config_t"), "ucp_config_t * *");
    assert_eq!(
        c_signature("fn(ucp_worker_h, * mut c_int) -> ucs_status_t"),
        (
            "ucs_status_t".to_string(),
            vec!["ucp_worker_h".to_string(), "int *".to_string()]
        )
    );
    assert_eq!(
        c_signature("fn() -> * const c_char").1,
        Vec::<String>::new()
    );
}
