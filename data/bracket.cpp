// PTB bracket trees as in the Stanford Sentiment Treebank, one per line:
// `(3 (2 It) (4 (2 's) (3 good)))`. The parser is iterative (an explicit stack
// of open nodes), so a deeply nested line cannot overflow the call stack.
#include "vjit/data.h"

#include <string_view>
#include <utility>

#include "data/text.h"
#include "vjit/error.h"

namespace vjit {

namespace {

bool is_word_char(char c) { return !data::is_blank(c) && c != '(' && c != ')'; }

class LineParser {
 public:
  LineParser(const std::string& source, const data::Line& line) : source_(source), line_(line) {}

  BracketTree parse() {
    while (true) {
      skip_blanks();
      if (at_end()) break;
      char c = peek();
      if (c == '(')
        open();
      else if (c == ')')
        close();
      else
        word();
    }
    if (!open_.empty())
      fail(int(line_.text.size()) + 1, "unbalanced parentheses: the node opened at column " +
                                           std::to_string(open_.back().column) + " is not closed");
    return std::move(tree_);
  }

 private:
  struct Open {
    BracketTree::Node node;
    int column = 0;
  };

  bool at_end() const { return pos_ >= line_.text.size(); }
  char peek() const { return line_.text[pos_]; }
  int column() const { return int(pos_) + 1; }
  void skip_blanks() {
    while (!at_end() && data::is_blank(peek())) ++pos_;
  }
  [[noreturn]] void fail(int column, const std::string& what) const {
    data::fail_at(source_, line_.number, column, what);
  }
  std::string_view token() {
    size_t start = pos_;
    while (!at_end() && is_word_char(peek())) ++pos_;
    return line_.text.substr(start, pos_ - start);
  }

  void open() {
    if (done_) fail(column(), "unexpected text after the tree");
    if (!open_.empty() && !open_.back().node.word.empty())
      fail(column(), "a leaf holds a word and cannot also have a child node");
    Open node;
    node.column = column();
    ++pos_;
    skip_blanks();
    if (at_end() || peek() == '(' || peek() == ')')
      fail(column(), at_end() || peek() == '(' ? "missing label after '('" : "empty node '()'");
    int label_column = column();
    std::string_view label = token();
    if (!data::parse_int(label, node.node.label))
      fail(label_column, "label '" + std::string(label) + "' is not an integer");
    open_.push_back(std::move(node));
  }

  void close() {
    if (open_.empty())
      fail(column(), done_ ? "unbalanced parentheses: unexpected ')' after the tree"
                           : "unbalanced parentheses: unexpected ')'");
    Open node = std::move(open_.back());
    open_.pop_back();
    if (node.node.word.empty() && node.node.children.empty())
      fail(column(), "empty node: the node opened at column " + std::to_string(node.column) +
                         " has a label but no word and no children");
    tree_.nodes.push_back(std::move(node.node));
    int index = int(tree_.nodes.size()) - 1;
    if (open_.empty())
      done_ = true;
    else
      open_.back().node.children.push_back(index);
    ++pos_;
  }

  void word() {
    int word_column = column();
    if (done_) fail(word_column, "unexpected text after the tree");
    if (open_.empty()) fail(word_column, "expected '(' at the start of a tree");
    std::string_view w = token();
    BracketTree::Node& node = open_.back().node;
    if (!node.children.empty())
      fail(word_column,
           "word '" + std::string(w) + "' follows a child node (a node holds a word or children)");
    if (!node.word.empty())
      fail(word_column, "second word '" + std::string(w) + "' in a leaf (a leaf holds one word)");
    node.word = std::string(w);
  }

  const std::string& source_;
  const data::Line& line_;
  size_t pos_ = 0;
  std::vector<Open> open_;
  BracketTree tree_;
  bool done_ = false;
};

void check_word(const std::string& word) {
  VJIT_USER_CHECK(!word.empty(), "format_bracket_tree: a leaf needs a word");
  for (char c : word)
    VJIT_USER_CHECK(is_word_char(c),
                    "format_bracket_tree: the word '" << word << "' contains a space or a parenthesis");
}

// Writes node `index` and its subtree; iterative so that depth is unbounded.
void format_node(const BracketTree& tree, int index, std::string& out) {
  std::vector<std::pair<int, size_t>> stack{{index, 0}};  // node, next child
  while (!stack.empty()) {
    auto& [node_index, next] = stack.back();
    const BracketTree::Node& node = tree.nodes[size_t(node_index)];
    if (next == 0) {
      out += "(" + std::to_string(node.label);
      if (node.children.empty()) {
        check_word(node.word);
        out += " " + node.word;
      }
    }
    if (next == node.children.size()) {
      out += ")";
      stack.pop_back();
      continue;
    }
    int child = node.children[next++];
    VJIT_USER_CHECK(child >= 0 && child < node_index, "format_bracket_tree: node "
                                                          << node_index << " has child " << child
                                                          << " (children come before their parents)");
    VJIT_USER_CHECK(node.word.empty(),
                    "format_bracket_tree: node " << node_index << " has both a word and children");
    out += " ";
    stack.push_back({child, 0});
  }
}

}  // namespace

std::vector<BracketTree> parse_bracket_trees(const std::string& text, const std::string& source_name) {
  std::vector<BracketTree> trees;
  for (const data::Line& line : data::split_lines(text)) {
    if (data::is_blank_line(line.text)) continue;
    trees.push_back(LineParser(source_name, line).parse());
  }
  return trees;
}

std::vector<BracketTree> read_bracket_file(const std::string& path) {
  return parse_bracket_trees(data::read_text_file(path, "bracket tree file"), path);
}

std::string format_bracket_tree(const BracketTree& tree) {
  VJIT_USER_CHECK(!tree.nodes.empty(), "format_bracket_tree: the tree has no nodes");
  std::string out;
  format_node(tree, int(tree.nodes.size()) - 1, out);
  return out;
}

std::string format_bracket_trees(std::span<const BracketTree> trees) {
  std::string out;
  for (const BracketTree& tree : trees) out += format_bracket_tree(tree) + "\n";
  return out;
}

void write_bracket_file(const std::string& path, std::span<const BracketTree> trees) {
  data::write_text_file(path, format_bracket_trees(trees), "bracket tree file");
}

}  // namespace vjit
