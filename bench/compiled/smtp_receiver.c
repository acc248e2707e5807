/* A minimal SMTP receiver in C: the compiled counterpart of inboxd's protocol (smtp/session.py,
 * transaction.py, data.py), for the benchmark in bench/compiled only, never for serving mail.
 *
 * It goes as far as inboxd's session goes before ingest takes over: it greets, answers EHLO,
 * MAIL, RCPT, DATA and QUIT (one write per reply, as inboxd's session does for a client that
 * waits for each one), checks the paths as loosely, writes the same Received: header with a
 * random queue id, gathers DATA until CRLF.CRLF, takes the stuffed dots out into one buffer of
 * the message (the bytes ingest would be handed), answers 250 at once, and writes one log line
 * per transaction to stderr, as inboxd does at its default level. No storage, no TLS, no
 * limits beyond a line's length: what it leaves out is what inboxd's protocol does besides.
 *
 * Usage: smtp_receiver PORT (0 for any); prints the port it listens on, on 127.0.0.1 only, and
 * serves until SIGTERM or SIGINT.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LINE_LIMIT 4096
#define READ_SIZE 65536
#define HOSTNAME "localhost"

enum mode { COMMANDS, DATA };

struct conn {
    int fd;
    enum mode mode;
    char line[LINE_LIMIT + 2];
    size_t line_len;
    int helo;
    char helo_name[256];
    char sender[321];
    char recipient[321];
    int recipients;
    char *msg;  /* DATA as it came, the Received: header first */
    size_t msg_len, msg_cap, header_len;
    char queue_id[17];
};

static volatile sig_atomic_t stopping;

static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

static void reply(struct conn *c, const char *text) {
    /* Replies are small and the client reads each one before the next command: one write each. */
    size_t len = strlen(text);
    if (write(c->fd, text, len) < 0 && errno != EAGAIN) {
        /* the client went away; the read side notices */
    }
}

static void append(struct conn *c, const char *data, size_t len) {
    if (c->msg_len + len > c->msg_cap) {
        size_t cap = c->msg_cap ? c->msg_cap : 8192;
        while (cap < c->msg_len + len) cap *= 2;
        c->msg = realloc(c->msg, cap);
        if (!c->msg) abort();
        c->msg_cap = cap;
    }
    memcpy(c->msg + c->msg_len, data, len);
    c->msg_len += len;
}

static const char *date_now(void) {
    /* RFC 5322 date, formatted once a second, as inboxd's _date_of caches it. */
    static char cached[64];
    static time_t cached_at = -1;
    time_t now = time(NULL);
    if (now != cached_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(cached, sizeof cached, "%a, %d %b %Y %H:%M:%S +0000", &tm);
        cached_at = now;
    }
    return cached;
}

/* `FROM:<addr> params` -> addr copied into out; 0 when malformed (inboxd's _path and _plausible). */
static int path(const char *arg, const char *keyword, char *out, size_t out_size) {
    size_t klen = strlen(keyword);
    if (strncasecmp(arg, keyword, klen) != 0) return 0;
    arg += klen;
    while (*arg == ' ') arg++;
    if (*arg != '<') return 0;
    const char *close = strchr(arg, '>');
    if (!close) return 0;
    size_t len = (size_t)(close - arg - 1);
    if (len >= out_size) return 0;
    for (const char *p = arg + 1; p < close; p++)
        if ((unsigned char)*p <= 32 || *p == '<') return 0;
    memcpy(out, arg + 1, len);
    out[len] = 0;
    return 1;
}

static void start_data(struct conn *c) {
    unsigned char id[8];
    static const char hex[] = "0123456789abcdef";
    if (getrandom(id, sizeof id, 0) != sizeof id) abort();
    for (int i = 0; i < 8; i++) {
        c->queue_id[2 * i] = hex[id[i] >> 4];
        c->queue_id[2 * i + 1] = hex[id[i] & 15];
    }
    c->queue_id[16] = 0;
    char header[1024];
    int n = snprintf(header, sizeof header,
                     "Received: from %s ([127.0.0.1])\r\n\tby " HOSTNAME " (inboxd) with ESMTP id %s\r\n"
                     "\tfor <%s>; %s\r\n",
                     c->helo_name, c->queue_id, c->recipient, date_now());
    c->msg_len = 0;
    append(c, header, (size_t)n);
    c->header_len = (size_t)n;
    c->mode = DATA;
    reply(c, "354 End data with <CR><LF>.<CR><LF>\r\n");
}

/* The message without its stuffed dots, in place; returns its length. */
static size_t unstuff(char *msg, size_t len) {
    size_t out = 0, i = 0;
    while (i < len) {
        char *dot = memmem(msg + i, len - i, "\r\n.", 3);
        size_t upto = dot ? (size_t)(dot - msg) + 2 : len;
        memmove(msg + out, msg + i, upto - i);
        out += upto - i;
        i = dot ? upto + 1 : len;  /* the dot after CRLF is dropped */
    }
    return out;
}

static void end_data(struct conn *c, size_t end) {
    size_t size = unstuff(c->msg, end);
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "INFO inboxd.smtp smtp transaction accepted client=127.0.0.1 from=%s mailbox=%s size=%zu "
                     "stage=DATA reply=\"250 2.0.0 OK: queued as %s\"\n",
                     c->sender, c->recipient, size - c->header_len, c->queue_id);
    if (write(2, line, (size_t)n) < 0) {
        /* a log that cannot be written is not the benchmark's concern */
    }
    char answer[64];
    snprintf(answer, sizeof answer, "250 2.0.0 OK: queued as %s\r\n", c->queue_id);
    reply(c, answer);
    c->sender[0] = c->recipient[0] = 0;
    c->recipients = 0;
    c->mode = COMMANDS;
}

/* Returns 0 when the connection is to be closed. */
static int command(struct conn *c, char *line) {
    char *arg = strchr(line, ' ');
    if (arg) *arg++ = 0;
    else arg = line + strlen(line);
    while (*arg == ' ') arg++;
    if (!strcasecmp(line, "EHLO") || !strcasecmp(line, "HELO")) {
        if (!*arg) {
            reply(c, "501 5.5.4 Syntax error\r\n");
            return 1;
        }
        snprintf(c->helo_name, sizeof c->helo_name, "%s", arg);
        c->helo = 1;
        c->sender[0] = 0;
        c->recipients = 0;
        reply(c, "250-" HOSTNAME "\r\n250-SIZE 26214400\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250-PIPELINING\r\n"
                 "250-ENHANCEDSTATUSCODES\r\n250 HELP\r\n");
    } else if (!strcasecmp(line, "MAIL")) {
        if (!c->helo) reply(c, "503 5.5.1 Send EHLO first\r\n");
        else if (!path(arg, "FROM:", c->sender, sizeof c->sender)) reply(c, "501 5.5.4 Syntax error\r\n");
        else reply(c, "250 2.1.0 OK\r\n");
    } else if (!strcasecmp(line, "RCPT")) {
        if (!c->sender[0]) reply(c, "503 5.5.1 Need MAIL first\r\n");
        else if (!path(arg, "TO:", c->recipient, sizeof c->recipient) || !strchr(c->recipient, '@'))
            reply(c, "501 5.1.3 Bad recipient address syntax\r\n");
        else {
            c->recipients++;
            reply(c, "250 2.1.5 OK\r\n");
        }
    } else if (!strcasecmp(line, "DATA")) {
        if (!c->recipients) reply(c, "503 5.5.1 Need RCPT first\r\n");
        else start_data(c);
    } else if (!strcasecmp(line, "RSET") || !strcasecmp(line, "NOOP")) {
        reply(c, "250 2.0.0 OK\r\n");
    } else if (!strcasecmp(line, "QUIT")) {
        reply(c, "221 2.0.0 Bye\r\n");
        return 0;
    } else {
        reply(c, "500 5.5.2 Command unrecognized\r\n");
    }
    return 1;
}

/* Take what arrived; returns 0 when the connection is to be closed. */
static int received(struct conn *c, const char *data, size_t len) {
    while (len) {
        if (c->mode == DATA) {
            size_t before = c->msg_len;
            append(c, data, len);
            /* Search from just before the new bytes: the terminator may straddle two reads. */
            size_t from = before >= c->header_len + 2 ? before - 4 : c->header_len - 2;
            if (from < c->header_len - 2) from = c->header_len - 2;
            char *end = memmem(c->msg + from, c->msg_len - from, "\r\n.\r\n", 5);
            if (!end) return 1;
            size_t at = (size_t)(end - c->msg);
            size_t rest = c->msg_len - (at + 5);
            end_data(c, at + 2);
            data = data + len - rest;
            len = rest;
            continue;
        }
        char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) + 1 : len;
        if (c->line_len + take > LINE_LIMIT) {
            reply(c, "500 5.5.2 Line too long\r\n");
            return 0;
        }
        memcpy(c->line + c->line_len, data, take);
        c->line_len += take;
        data += take;
        len -= take;
        if (!nl) return 1;
        c->line[--c->line_len] = 0;
        if (c->line_len && c->line[c->line_len - 1] == '\r') c->line[--c->line_len] = 0;
        c->line_len = 0;
        if (!command(c, c->line)) return 0;
    }
    return 1;
}

static void drop(int epoll, struct conn *c) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->msg);
    free(c);
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 0;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 1024)) {
        perror("listen");
        return 1;
    }
    socklen_t addr_len = sizeof addr;
    getsockname(listener, (struct sockaddr *)&addr, &addr_len);
    printf("%d\n", ntohs(addr.sin_port));
    fflush(stdout);
    int epoll = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &ev);
    static char buf[READ_SIZE];
    struct epoll_event events[64];
    while (!stopping) {
        int n = epoll_wait(epoll, events, 64, 200);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    c = calloc(1, sizeof *c);
                    if (!c) abort();
                    c->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &cev);
                    reply(c, "220 " HOSTNAME " ESMTP inboxd ready\r\n");
                }
                continue;
            }
            ssize_t got = read(c->fd, buf, sizeof buf);
            if (got < 0 && errno == EAGAIN) continue;
            if (got <= 0 || !received(c, buf, (size_t)got)) drop(epoll, c);
        }
    }
    return 0;
}
