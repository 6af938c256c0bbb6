// C++ under the library: new/delete, std::vector growth, std::string, a map, each in a noinline
// function of namespace app. What stays live at exit is known: NODES nodes of app::make_nodes,
// the 1,024-long buffer of app::grow_vector (and its vector object), the 201-byte buffer of
// app::make_string (and its string object). app::churn frees all it makes.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace app {

struct Node {
    long values[12];
    Node *next;
};

static const int NODES = 50;

__attribute__((noinline)) Node *make_nodes(int n) {
    Node *head = nullptr;
    for (int i = 0; i < n; i++) {
        Node *node = new Node(); /* NEW_LINE */
        node->values[0] = i;
        node->next = head;
        head = node;
    }
    return head;
}

__attribute__((noinline)) std::vector<long> *grow_vector(int n) {
    auto *v = new std::vector<long>();
    for (int i = 0; i < n; i++)
        v->push_back(i);
    return v;
}

__attribute__((noinline)) std::string *make_string() {
    return new std::string(200, 'x');
}

__attribute__((noinline)) long churn(int rounds) {
    long sum = 0;
    for (int r = 0; r < rounds; r++) {
        std::map<std::string, std::vector<int>> m;
        for (int i = 0; i < 200; i++)
            m["key number " + std::to_string(i)].assign(i % 17 + 1, i);
        for (auto &kv : m)
            sum += kv.second.size() + kv.first.size();
        int *array = new int[1000 + r];
        array[r] = r;
        sum += array[r];
        delete[] array;
        Node *node = new Node();
        sum += (long)node->values[3];
        delete node;
    }
    return sum;
}

} // namespace app

app::Node *volatile kept_nodes;
std::vector<long> *volatile kept_vector;
std::string *volatile kept_string;

int main() {
    kept_nodes = app::make_nodes(app::NODES);
    kept_vector = app::grow_vector(1000);
    kept_string = app::make_string();
    long sum = app::churn(50);
    std::printf("%ld %zu %zu\n", sum, kept_vector->capacity(), kept_string->size());
    return 0;
}
