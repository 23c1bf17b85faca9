//! The new source: what the root's recipe makes now, path by path.
//!
//! The parts are laid one over the other in the order the install laid
//! them out: the profile's links and mount points, the trees, the
//! baseline, the images (each layer over the ones below, whiteouts
//! removing what they name), the host files. A later part's entry
//! replaces an earlier one's at the same path (a non-directory takes
//! what was beneath the path with it); directories merge. So the source
//! is, by construction, what a fresh install of the recipe would lay
//! out, without laying it out.

mod fold;
mod images;
mod stage;
mod trees;

pub(super) use fold::{Fold, From, Want};
pub(super) use images::{
    ImageOptions, OpenedImage, lay_archive, lay_images, lay_recorded,
    open_images, recorded_layers, reusable,
};
pub(super) use stage::Staging;
pub(super) use trees::{host_files, layout, trees};
