# Sourced by the perf scripts: data_of MODEL prints vjit-bench's --data flag
# for the real data set of MODEL where it exists under $data (nothing else).
data_of() {
  case "$1" in
    tree_lstm|tree_gru) [ -f "$data/sst/train.txt" ] && echo "--data $data/sst/train.txt" ;;
    var_lstm) [ -f "$data/ptb/dev.txt" ] && echo "--data $data/ptb/dev.txt" ;;
    lattice_lstm) [ -f "$data/lattice/train.txt" ] && echo "--data $data/lattice/train.txt" ;;
  esac
  return 0
}
