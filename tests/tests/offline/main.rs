//! The tests that need no cluster: the decision core exhaustively and by property, the
//! generated API, the CRD, the diagrams, the testing helper.

mod crd;
mod diagrams;
mod generated;
mod testing_helper;
