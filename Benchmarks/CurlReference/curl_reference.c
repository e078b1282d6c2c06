/* The reference the Swift engine is measured against: a minimal C curl-multi sender doing
 * only what the engine must do, the way that measured fastest on this machine: one epoll
 * loop per thread with its own multi handle, reused easy handles with fixed options, a
 * pre-parsed URL, a bounded number of transfers inside libcurl, and completions read and
 * replaced before every wait.
 *
 * usage: curl_reference PORT CAFILE REQUESTS THREADS CONNECTIONS STREAMS [PATH]
 *                      [--header LINE]... [--payload-file FILE] [--device-paths]
 * prints: requests=N ok=N seconds=S rate=R cpu_us_per_request=C peak_rss_kb=K
 *
 * Without options each request carries apns-topic, apns-push-type and an apns-id of its own.
 * Like the engine, it sends no accept or content-type header of libcurl's, gives libcurl the
 * path as the request target and no proxy variables to look up per transfer.
 * --header (repeatable), --payload-file and --device-paths send what DispatcherBench sends
 * with the same options, the daemon's requests: these header lines, the same for every
 * request (set once per easy handle, as the engine shares a campaign's), this body, and a
 * path /3/device/<64 hex> per request from 1,024 distinct ones. */
#include <curl/curl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>

struct loop;

struct transfer {
    CURL *easy;
    CURLU *url;
    struct curl_slist nodes[5];
    char lines[3][96];
};

struct loop {
    CURLM *multi;
    int epfd;
    long deadline_ms; /* -1: no timer */
    unsigned char *mask;
    int mask_size;
    struct transfer *transfers;
    int *free_list;
    int free_count;
    long remaining;
    long done;
    long ok;
    int port;
    const char *cafile;
    int in_flight_limit;
    int in_curl;
};

static const char *request_path = "/ok";
static const char default_body[] = "{\"aps\":{\"alert\":\"hello\"}}";
static const char *body = default_body;
static long body_size = sizeof default_body - 1;
/* --header lines as one list every easy handle points at; NULL: the per-request default. */
static struct curl_slist *fixed_headers;
/* --device-paths: 1,024 paths, sent in turn; NULL: request_path. */
enum { device_path_count = 1024 };
static char (*device_paths)[80];

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static size_t discard(char *data, size_t size, size_t n, void *user) {
    (void)data; (void)user;
    return size * n;
}

static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
    (void)easy; (void)socketp;
    struct loop *loop = userp;
    if (s >= loop->mask_size) {
        int size = s + 64;
        loop->mask = realloc(loop->mask, size);
        memset(loop->mask + loop->mask_size, 0, size - loop->mask_size);
        loop->mask_size = size;
    }
    unsigned char current = loop->mask[s];
    if (what == CURL_POLL_REMOVE) {
        if (current) epoll_ctl(loop->epfd, EPOLL_CTL_DEL, s, NULL);
        loop->mask[s] = 0;
        return 0;
    }
    unsigned char wanted = (unsigned char)what; /* IN=1, OUT=2 */
    if (wanted == current) return 0;
    struct epoll_event ev = {0};
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    ev.data.fd = s;
    epoll_ctl(loop->epfd, current ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s, &ev);
    loop->mask[s] = wanted;
    return 0;
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    struct loop *loop = userp;
    loop->deadline_ms = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    return 0;
}

static void refill(struct loop *loop, long *sequence) {
    while (loop->remaining > 0 && loop->in_curl < loop->in_flight_limit && loop->free_count > 0) {
        int index = loop->free_list[--loop->free_count];
        struct transfer *t = &loop->transfers[index];
        long n = (*sequence)++;
        /* The path as the request target, as the engine does: setting it into the URL made
         * libcurl take the URL apart and re-encode the path for every request. */
        curl_easy_setopt(t->easy, CURLOPT_REQUEST_TARGET, device_paths ? device_paths[n % device_path_count] : request_path);
        if (!fixed_headers) {
            snprintf(t->lines[0], sizeof t->lines[0], "apns-topic: com.example.app");
            snprintf(t->lines[1], sizeof t->lines[1], "apns-push-type: alert");
            snprintf(t->lines[2], sizeof t->lines[2], "apns-id: 00000000-0000-0000-0000-%012ld", n % 10000);
            for (int i = 0; i < 3; i++) {
                t->nodes[i].data = t->lines[i];
                t->nodes[i].next = &t->nodes[i + 1];
            }
            t->nodes[3].data = (char *)"Accept:";
            t->nodes[3].next = &t->nodes[4];
            t->nodes[4].data = (char *)"Content-Type:";
            t->nodes[4].next = NULL;
        }
        curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(t->easy, CURLOPT_POSTFIELDSIZE, body_size);
        curl_multi_add_handle(loop->multi, t->easy);
        loop->remaining--;
        loop->in_curl++;
    }
}

static void read_completions(struct loop *loop) {
    int left;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(loop->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;
        long status = 0;
        char *priv = NULL;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
        curl_multi_remove_handle(loop->multi, easy);
        loop->in_curl--;
        loop->done++;
        if (result == CURLE_OK && status == 200) loop->ok++;
        loop->free_list[loop->free_count++] = (int)(intptr_t)priv;
    }
}

static void *run(void *arg) {
    struct loop *loop = arg;
    long sequence = 0;
    int running = 0;
    struct epoll_event events[256];
    while (loop->remaining > 0 || loop->in_curl > 0) {
        refill(loop, &sequence);
        long now = now_ms();
        if (loop->deadline_ms >= 0 && loop->deadline_ms <= now) {
            loop->deadline_ms = -1;
            curl_multi_socket_action(loop->multi, CURL_SOCKET_TIMEOUT, 0, &running);
            read_completions(loop);
            continue;
        }
        int timeout = loop->deadline_ms < 0 ? 1000 : (int)(loop->deadline_ms - now);
        int n = epoll_wait(loop->epfd, events, 256, timeout);
        for (int i = 0; i < n; i++) {
            int mask = 0;
            if (events[i].events & (EPOLLIN | EPOLLHUP)) mask |= CURL_CSELECT_IN;
            if (events[i].events & EPOLLOUT) mask |= CURL_CSELECT_OUT;
            if (events[i].events & EPOLLERR) mask |= CURL_CSELECT_ERR;
            curl_multi_socket_action(loop->multi, events[i].data.fd, mask, &running);
        }
        if (loop->deadline_ms >= 0 && now_ms() >= loop->deadline_ms) {
            loop->deadline_ms = -1;
            curl_multi_socket_action(loop->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        read_completions(loop);
    }
    return NULL;
}

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

static void usage(const char *program) {
    fprintf(stderr, "usage: %s PORT CAFILE REQUESTS THREADS CONNECTIONS STREAMS [PATH] "
                    "[--header LINE]... [--payload-file FILE] [--device-paths]\n", program);
    exit(2);
}

/* The whole file, as the request body. */
static void read_body(const char *file) {
    FILE *f = fopen(file, "rb");
    if (!f) { fprintf(stderr, "curl_reference: cannot read --payload-file %s\n", file); exit(2); }
    static char buffer[8192];
    size_t size = fread(buffer, 1, sizeof buffer, f);
    if (!feof(f)) { fprintf(stderr, "curl_reference: --payload-file %s is over %zu bytes\n", file, sizeof buffer); exit(2); }
    fclose(f);
    body = buffer;
    body_size = (long)size;
}

/* 64 lowercase hex digits, distinct per index: the device tokens DispatcherBench uses. */
static void make_device_paths(void) {
    device_paths = calloc(device_path_count, sizeof *device_paths);
    for (unsigned long i = 0; i < device_path_count; i++)
        snprintf(device_paths[i], sizeof device_paths[i], "/3/device/%064lx", i * 2654435761UL + 1);
}

int main(int argc, char **argv) {
    if (argc < 7) usage(argv[0]);
    int port = atoi(argv[1]);
    long requests = atol(argv[3]);
    int threads = atoi(argv[4]);
    int connections = atoi(argv[5]);
    int streams = atoi(argv[6]);
    int next = 7;
    const char **header_lines = calloc(argc, sizeof *header_lines);
    int header_count = 0;
    if (argc > next && strncmp(argv[next], "--", 2) != 0) request_path = argv[next++];
    for (; next < argc; next++) {
        if (strcmp(argv[next], "--header") == 0 && next + 1 < argc) header_lines[header_count++] = argv[++next];
        else if (strcmp(argv[next], "--payload-file") == 0 && next + 1 < argc) read_body(argv[++next]);
        else if (strcmp(argv[next], "--device-paths") == 0) make_device_paths();
        else usage(argv[0]);
    }
    signal(SIGPIPE, SIG_IGN);
    /* What the engine does before curl_global_init (CurlRuntime): libcurl's 16 KiB buffers
     * mapped on their own, so only their written pages are resident. */
    mallopt(M_MMAP_THRESHOLD, 16 * 1024);
    curl_global_init(CURL_GLOBAL_ALL);
    for (int i = 0; i < header_count; i++) fixed_headers = curl_slist_append(fixed_headers, header_lines[i]);
    /* Like the engine: no accept or content-type header of libcurl's own. */
    if (fixed_headers) {
        fixed_headers = curl_slist_append(fixed_headers, "Accept:");
        fixed_headers = curl_slist_append(fixed_headers, "Content-Type:");
    }
    char base[128];
    snprintf(base, sizeof base, "https://127.0.0.1:%d/", port);

    struct loop *loops = calloc(threads, sizeof *loops);
    for (int i = 0; i < threads; i++) {
        struct loop *loop = &loops[i];
        loop->multi = curl_multi_init();
        loop->epfd = epoll_create1(EPOLL_CLOEXEC);
        loop->deadline_ms = -1;
        loop->remaining = requests / threads + (i < requests % threads ? 1 : 0);
        loop->in_flight_limit = connections * streams;
        loop->transfers = calloc(loop->in_flight_limit, sizeof *loop->transfers);
        loop->free_list = calloc(loop->in_flight_limit, sizeof(int));
        curl_multi_setopt(loop->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
        curl_multi_setopt(loop->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)connections);
        curl_multi_setopt(loop->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, (long)streams);
        curl_multi_setopt(loop->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
        curl_multi_setopt(loop->multi, CURLMOPT_SOCKETDATA, loop);
        curl_multi_setopt(loop->multi, CURLMOPT_TIMERFUNCTION, on_timer);
        curl_multi_setopt(loop->multi, CURLMOPT_TIMERDATA, loop);
        for (int j = 0; j < loop->in_flight_limit; j++) {
            struct transfer *t = &loop->transfers[j];
            t->easy = curl_easy_init();
            t->url = curl_url();
            curl_url_set(t->url, CURLUPART_URL, base, 0);
            curl_easy_setopt(t->easy, CURLOPT_CURLU, t->url);
            curl_easy_setopt(t->easy, CURLOPT_PRIVATE, (char *)(intptr_t)j);
            curl_easy_setopt(t->easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
            curl_easy_setopt(t->easy, CURLOPT_PIPEWAIT, 1L);
            curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(t->easy, CURLOPT_TCP_NODELAY, 1L);
            curl_easy_setopt(t->easy, CURLOPT_CAINFO, argv[2]);
            /* Like the engine: proxy variables settled once, not looked up per transfer. */
            curl_easy_setopt(t->easy, CURLOPT_PROXY, "");
            curl_easy_setopt(t->easy, CURLOPT_NOPROXY, "");
            curl_easy_setopt(t->easy, CURLOPT_POST, 1L);
            curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, fixed_headers ? fixed_headers : t->nodes);
            curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, discard);
            loop->free_list[loop->free_count++] = j;
        }
        loop->port = port;
    }
    double cpu0 = cpu_seconds();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t *ids = calloc(threads, sizeof *ids);
    for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, run, &loops[i]);
    long done = 0, ok = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        done += loops[i].done;
        ok += loops[i].ok;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    double cpu = cpu_seconds() - cpu0;
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("requests=%ld ok=%ld seconds=%.3f rate=%.0f cpu_us_per_request=%.2f peak_rss_kb=%ld\n",
           done, ok, seconds, done / seconds, cpu * 1e6 / (done ? done : 1), usage.ru_maxrss);
    return ok == requests ? 0 : 1;
}
