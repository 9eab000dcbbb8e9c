pub mod certs;
pub mod check;
pub mod deploy;
pub mod inventory;
pub mod node;
pub mod nodes;
pub mod ptx;
pub mod run;
