// SOCK_SEQPACKET Unix sockets with one passed fd (SCM_RIGHTS), which Node lacks: the ZDS
// socket between the node agent and ztunnel (docs/zds.md). Every socket is non-blocking;
// readiness comes from a libuv poll handle on Node's own loop, so nothing here ever blocks
// the event loop. Errors throw an Error whose `code` is the errno name (EAGAIN, ENOENT, …)
// and whose `errno` is the number, as Node's own errors do.
#define _GNU_SOURCE
#include <errno.h>
#include <node_api.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

// Space for a few fds: a peer that sends more than one is refused, but every fd it sent
// must still reach JS to be closed (the kernel installs them all, up to what fits).
#define MAX_RECV_FDS 8
#define MAX_MESSAGE (256 * 1024)

#define CHECK(call)                                                                          \
  do {                                                                                       \
    if ((call) != napi_ok) {                                                                 \
      napi_throw_error(env, NULL, "seqpacket: N-API call failed: " #call);                   \
      return NULL;                                                                           \
    }                                                                                        \
  } while (0)

static napi_value throw_errno(napi_env env, const char *syscall, int err) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", syscall, strerror(err));
  napi_value message, error, code, errno_value;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  const char *name = uv_err_name(-err);
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &code);
  napi_set_named_property(env, error, "code", code);
  napi_create_int32(env, err, &errno_value);
  napi_set_named_property(env, error, "errno", errno_value);
  napi_throw(env, error);
  return NULL;
}

static int arg_int(napi_env env, napi_value v, int32_t *out) {
  return napi_get_value_int32(env, v, out) == napi_ok;
}

static napi_value make_int(napi_env env, int64_t n) {
  napi_value v;
  napi_create_int64(env, n, &v);
  return v;
}

static int unix_address(napi_env env, napi_value v, struct sockaddr_un *addr) {
  size_t len = 0;
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (napi_get_value_string_utf8(env, v, addr->sun_path, sizeof addr->sun_path, &len) != napi_ok)
    return 0;
  return len > 0 && len < sizeof addr->sun_path - 1;
}

// socket() -> fd: AF_UNIX, SOCK_SEQPACKET, non-blocking, close-on-exec.
static napi_value js_socket(napi_env env, napi_callback_info info) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return throw_errno(env, "socket", errno);
  return make_int(env, fd);
}

// bind(fd, path), listen(fd, backlog), connect(fd, path).
static napi_value js_bind_or_connect(napi_env env, napi_callback_info info, int do_connect) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t fd;
  struct sockaddr_un addr;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2 || !arg_int(env, argv[0], &fd) || !unix_address(env, argv[1], &addr)) {
    napi_throw_type_error(env, NULL, "seqpacket: want (fd, path) with a path shorter than 107 bytes");
    return NULL;
  }
  int rc = do_connect ? connect(fd, (struct sockaddr *)&addr, sizeof addr)
                      : bind(fd, (struct sockaddr *)&addr, sizeof addr);
  if (rc < 0) return throw_errno(env, do_connect ? "connect" : "bind", errno);
  return NULL;
}

static napi_value js_bind(napi_env env, napi_callback_info info) {
  return js_bind_or_connect(env, info, 0);
}

static napi_value js_connect(napi_env env, napi_callback_info info) {
  return js_bind_or_connect(env, info, 1);
}

static napi_value js_listen(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t fd, backlog;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2 || !arg_int(env, argv[0], &fd) || !arg_int(env, argv[1], &backlog)) {
    napi_throw_type_error(env, NULL, "seqpacket: want (fd, backlog)");
    return NULL;
  }
  if (listen(fd, backlog) < 0) return throw_errno(env, "listen", errno);
  return NULL;
}

// accept(fd) -> new non-blocking fd, or -1 when none is waiting.
static napi_value js_accept(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1 || !arg_int(env, argv[0], &fd)) {
    napi_throw_type_error(env, NULL, "seqpacket: want (fd)");
    return NULL;
  }
  int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (c < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
      return make_int(env, -1);
    return throw_errno(env, "accept", errno);
  }
  return make_int(env, c);
}

// send(fd, buffer, passFd) -> bytes sent, or -1 when the socket is full. passFd < 0: none.
static napi_value js_send(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t fd, pass_fd = -1;
  void *data;
  size_t len;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2 || !arg_int(env, argv[0], &fd) ||
      napi_get_buffer_info(env, argv[1], &data, &len) != napi_ok ||
      (argc >= 3 && !arg_int(env, argv[2], &pass_fd))) {
    napi_throw_type_error(env, NULL, "seqpacket: want (fd, buffer, passFd)");
    return NULL;
  }
  struct iovec iov = {.iov_base = data, .iov_len = len};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (pass_fd >= 0) {
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
  }
  ssize_t n;
  do n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return make_int(env, -1);
    return throw_errno(env, "sendmsg", errno);
  }
  return make_int(env, n);
}

// recv(fd, maxBytes) -> null when nothing is waiting, else
// { data: Buffer, fds: number[], truncated: bool, controlTruncated: bool }.
// An empty `data` with no fds is the peer's orderly close.
static napi_value js_recv(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t fd, max;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2 || !arg_int(env, argv[0], &fd) || !arg_int(env, argv[1], &max) || max <= 0 ||
      max > MAX_MESSAGE) {
    napi_throw_type_error(env, NULL, "seqpacket: want (fd, maxBytes) with 0 < maxBytes <= 256 KiB");
    return NULL;
  }
  char *buf = malloc((size_t)max);
  if (buf == NULL) return throw_errno(env, "recvmsg", ENOMEM);
  struct iovec iov = {.iov_base = buf, .iov_len = (size_t)max};
  union {
    char buf[CMSG_SPACE(sizeof(int) * MAX_RECV_FDS)];
    struct cmsghdr align;
  } control;
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
  ssize_t n;
  do n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    int err = errno;
    free(buf);
    if (err == EAGAIN || err == EWOULDBLOCK) {
      napi_value null_value;
      napi_get_null(env, &null_value);
      return null_value;
    }
    return throw_errno(env, "recvmsg", err);
  }
  napi_value result, data, fds, flag;
  napi_create_object(env, &result);
  napi_create_buffer_copy(env, (size_t)n, buf, NULL, &data);
  free(buf);
  napi_set_named_property(env, result, "data", data);
  napi_create_array(env, &fds);
  uint32_t count = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      napi_set_element(env, fds, count++, make_int(env, got));
    }
  }
  napi_set_named_property(env, result, "fds", fds);
  napi_get_boolean(env, (msg.msg_flags & MSG_TRUNC) != 0, &flag);
  napi_set_named_property(env, result, "truncated", flag);
  napi_get_boolean(env, (msg.msg_flags & MSG_CTRUNC) != 0, &flag);
  napi_set_named_property(env, result, "controlTruncated", flag);
  return result;
}

static napi_value js_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1 || !arg_int(env, argv[0], &fd) || fd < 0) {
    napi_throw_type_error(env, NULL, "seqpacket: want (fd)");
    return NULL;
  }
  if (close(fd) < 0 && errno != EINTR) return throw_errno(env, "close", errno);
  return NULL;
}

// A libuv poll handle on one fd: watch(fd, callback) -> handle; callback(readable, hangup)
// runs on the event loop whenever the fd is readable or the peer hung up. unwatch(handle)
// stops it (idempotent). unref(handle) lets the process exit while it waits.
typedef struct {
  uv_poll_t poll;
  napi_env env;
  napi_ref callback;
  napi_async_context context;
  int stopped;
} watcher_t;

static void on_closed(uv_handle_t *handle) { free(handle->data); }

static void stop_watcher(watcher_t *w) {
  if (w->stopped) return;
  w->stopped = 1;
  uv_poll_stop(&w->poll);
  napi_delete_reference(w->env, w->callback);
  napi_async_destroy(w->env, w->context);
  uv_close((uv_handle_t *)&w->poll, on_closed);
}

static void on_poll(uv_poll_t *handle, int status, int events) {
  watcher_t *w = handle->data;
  if (w->stopped) return;
  napi_env env = w->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value callback, global, argv[2], result;
  napi_get_reference_value(env, w->callback, &callback);
  napi_get_global(env, &global);
  // A poll error (status < 0) is reported as a hangup: the owner then reads the error.
  napi_get_boolean(env, status == 0 && (events & UV_READABLE) != 0, &argv[0]);
  napi_get_boolean(env, status < 0 || (events & UV_DISCONNECT) != 0, &argv[1]);
  if (callback != NULL &&
      napi_make_callback(env, w->context, global, callback, 2, argv, &result) == napi_pending_exception) {
    napi_value error;
    napi_get_and_clear_last_exception(env, &error);
    napi_fatal_exception(env, error);
  }
  napi_close_handle_scope(env, scope);
}

static void finalize_watcher(napi_env env, void *data, void *hint) {
  // The JS handle was collected: the watcher's memory belongs to libuv until closed.
  (void)env;
  (void)data;
  (void)hint;
}

static napi_value js_watch(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], name, handle;
  int32_t fd;
  napi_valuetype type;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2 || !arg_int(env, argv[0], &fd) || napi_typeof(env, argv[1], &type) != napi_ok ||
      type != napi_function) {
    napi_throw_type_error(env, NULL, "seqpacket: want (fd, callback)");
    return NULL;
  }
  uv_loop_t *loop;
  CHECK(napi_get_uv_event_loop(env, &loop));
  watcher_t *w = calloc(1, sizeof *w);
  if (w == NULL) return throw_errno(env, "watch", ENOMEM);
  w->env = env;
  int rc = uv_poll_init(loop, &w->poll, fd);
  if (rc < 0) {
    free(w);
    return throw_errno(env, "uv_poll_init", -rc);
  }
  w->poll.data = w;
  napi_create_reference(env, argv[1], 1, &w->callback);
  napi_create_string_utf8(env, "zmesh.seqpacket", NAPI_AUTO_LENGTH, &name);
  napi_async_init(env, NULL, name, &w->context);
  rc = uv_poll_start(&w->poll, UV_READABLE | UV_DISCONNECT, on_poll);
  if (rc < 0) {
    stop_watcher(w);
    return throw_errno(env, "uv_poll_start", -rc);
  }
  CHECK(napi_create_external(env, w, finalize_watcher, NULL, &handle));
  return handle;
}

static watcher_t *watcher_arg(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  void *data = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_external(env, argv[0], &data) != napi_ok) {
    napi_throw_type_error(env, NULL, "seqpacket: want a watch handle");
    return NULL;
  }
  return data;
}

static napi_value js_unwatch(napi_env env, napi_callback_info info) {
  watcher_t *w = watcher_arg(env, info);
  if (w != NULL) stop_watcher(w);
  return NULL;
}

static napi_value js_unref(napi_env env, napi_callback_info info) {
  watcher_t *w = watcher_arg(env, info);
  if (w != NULL && !w->stopped) uv_unref((uv_handle_t *)&w->poll);
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"socket", NULL, js_socket, NULL, NULL, NULL, napi_enumerable, NULL},
      {"bind", NULL, js_bind, NULL, NULL, NULL, napi_enumerable, NULL},
      {"listen", NULL, js_listen, NULL, NULL, NULL, napi_enumerable, NULL},
      {"connect", NULL, js_connect, NULL, NULL, NULL, napi_enumerable, NULL},
      {"accept", NULL, js_accept, NULL, NULL, NULL, napi_enumerable, NULL},
      {"send", NULL, js_send, NULL, NULL, NULL, napi_enumerable, NULL},
      {"recv", NULL, js_recv, NULL, NULL, NULL, napi_enumerable, NULL},
      {"close", NULL, js_close, NULL, NULL, NULL, napi_enumerable, NULL},
      {"watch", NULL, js_watch, NULL, NULL, NULL, napi_enumerable, NULL},
      {"unwatch", NULL, js_unwatch, NULL, NULL, NULL, napi_enumerable, NULL},
      {"unref", NULL, js_unref, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
